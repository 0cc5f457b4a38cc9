"""Reading the output: DuckDB views, pandas frames, names and units, charts, the quality report."""
