"""etl's tests: tests/unit (no server, no subprocess: `make test-fast`), tests/e2e (everything that starts
the emulator, S3, Dask, a browser or an `etl` process), tests/support (the helpers both share)."""
