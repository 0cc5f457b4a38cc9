"""etl.pipeline's stages on their own: admission, clean, dimensions, late data, checkpoint groups."""
