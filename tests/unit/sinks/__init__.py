"""etl.sinks on its own: file rewrites and the lake tables (Delta, Iceberg, the SQLite catalog)."""
