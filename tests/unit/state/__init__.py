"""etl.state on its own: checkpoints at scale."""
