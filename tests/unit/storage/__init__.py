"""etl.storage on its own: a local folder or memory://."""
