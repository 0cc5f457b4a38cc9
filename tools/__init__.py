"""The repository's own tooling, outside the `etl` package: checks that `make lint` runs."""
