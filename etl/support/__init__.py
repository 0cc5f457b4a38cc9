"""Process-wide helpers every layer may use: secret redaction, allocator tuning, optional imports."""
