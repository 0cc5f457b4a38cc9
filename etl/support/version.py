"""The release of etl: the producer its lineage events and traces name."""

__version__ = "0.1.0"
