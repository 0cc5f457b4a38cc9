"""etl.pipeline's stages on their own: admission, fetch, clean, dimensions, late data, checkpoint groups."""
