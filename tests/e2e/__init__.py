"""End-to-end tests: the emulator over a socket, S3 (moto), Dask workers, a browser, `etl` processes."""
