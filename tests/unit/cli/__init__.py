"""etl.cli on its own: what people read."""
