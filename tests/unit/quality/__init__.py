"""etl.quality on its own: the quality rows."""
