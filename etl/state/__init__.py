"""Checkpoints (covered intervals per parameter and series) and the run lock."""
