"""etl.dataset on its own: what analysts read."""
