"""EmulatorConfig: everything an emulator is made of."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from etl_emulator.answers import Record
from etl_emulator.faults import Faults
from etl_emulator.lateness import Lateness


@dataclass
class EmulatorConfig:
    """Everything an emulator is made of. `users`: list of {login, password, objects: "all" | [ids]}
    (None: demo/demo sees all, restricted/restricted the odd ids). `now_ms`: a fixed clock (None:
    the real time); `date_header`: answers tell it in a Date header (False: as a server without a
    clock, which RFC 9110 lets omit it). `workers` > 1 only applies to `serve` (separate processes, separate state)."""

    host: str = "127.0.0.1"
    port: int = 8765
    base_path: str = "/sem-restservices"
    seed: int = 42
    objects: int = 3
    params_per_object: int = 4
    calc_per_object: int = 2
    period_range: tuple[int, int] = (10, 900)
    users: list[Record] | None = None
    now_ms: int | None = None
    date_header: bool = True
    faults: Faults = field(default_factory=Faults)
    lateness: Lateness = field(default_factory=Lateness)  # when points reach the platform (lateness.py)
    request_log: str | Path | None = None
    workers: int = 1
    tls_cert: str | Path | None = None  # PEM files: serve https instead of http
    tls_key: str | Path | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("give both tls_cert and tls_key, or neither")
        self.tls_cert = str(self.tls_cert) if self.tls_cert else None
        self.tls_key = str(self.tls_key) if self.tls_key else None
        if isinstance(self.faults, dict):
            self.faults = Faults(**self.faults)
        self.lateness = Lateness.of(self.lateness)
        self.period_range = (int(self.period_range[0]), int(self.period_range[1]))

    def to_json(self) -> str:
        doc = dataclasses.asdict(self)
        doc["faults"] = self.faults.as_dict()
        doc["lateness"] = self.lateness.as_dict()
        doc["request_log"] = str(self.request_log) if self.request_log else None
        return orjson.dumps(doc).decode()

    @classmethod
    def from_json(cls, text: str) -> EmulatorConfig:
        return cls(**orjson.loads(text))

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"

    def ssl_options(self) -> dict[str, Any]:
        """uvicorn's options for serving TLS, if asked to."""
        return {"ssl_certfile": self.tls_cert, "ssl_keyfile": self.tls_key} if self.tls_cert else {}
