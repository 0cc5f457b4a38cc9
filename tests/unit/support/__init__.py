"""etl.support on its own: redaction, terminal text, CPUs, optional extras, how the process was started."""
