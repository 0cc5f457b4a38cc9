"""The quality dataset: a row per parameter and day of raw data, computed while the raw files are written."""
