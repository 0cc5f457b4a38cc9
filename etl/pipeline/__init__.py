"""A run's stages: build, discover, plan, fetch, clean, slab, execute, checkpoint, summarize."""
