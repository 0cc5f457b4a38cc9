"""Servers that are not ours, replaying what the emulator answered to one `etl run` (benchmarks/foreign.py)."""
