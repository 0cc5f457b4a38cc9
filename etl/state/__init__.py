"""Checkpoints: what is written, per parameter and series (`Coverage`), kept on storage as a base plus
a log (`StateStore`), and the run lock that lets one run at a time commit to them."""

from etl.state.coverage import Coverage
from etl.state.lock import RunLock
from etl.state.store import StateStore

__all__ = ["Coverage", "RunLock", "StateStore"]
