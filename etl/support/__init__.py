"""Process-wide helpers every layer may use: secret redaction, allocator tuning, optional imports, a
Ctrl-C noted as well as raised."""
