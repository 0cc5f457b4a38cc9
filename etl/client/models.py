"""Typed records of the shapes the document shows; everything else is kept as it came."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Documented fields are typed; unknown fields are kept (extra="allow"), missing ones default."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def raw(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class UserState(Record):
    id: int | None = None
    name: str | None = None
    comment: str | None = None


class User(Record):
    id: int
    login: str
    firstname: str | None = None
    lastname: str | None = None
    middlename: str | None = None
    state: UserState | None = None
    theme: int | None = None
    ilocale: str | None = None
    defaultScreen: int | None = None
    soundOn: bool | None = None
    comment: str | None = None
    authService: str | None = None
    privileges: list[Any] = []


class ObjectShort(Record):
    id: int
    shortname: str | None = None


class ObjectFull(ObjectShort):
    fullname: str | None = None
    comment: str | None = None
    zipcode: str | None = None
    timezone: int | None = None
    area: float | None = None
    latitude: float | None = None
    longitude: float | None = None
    employees: int | None = None
    objrubric: dict[str, Any] | None = None
    sdirobjectstate: dict[str, Any] | None = None
    worstparamstate: dict[str, Any] | None = None
    worstparamcount: int | None = None
    paramtags: list[str] = []
    calendar: dict[str, Any] | None = None
    address: str | None = None
    controllersTotalCount: int | None = None
    controllersOfflineCount: int | None = None
    attrs: dict[str, Any] = {}


class ParamStatus(Record):
    id: int | None = None
    statename: str | None = None
    statecolor: str | None = None
    comment: str | None = None


class Device(Record):
    id: int
    devicename: str | None = None
    devicetopic: str | None = None
    devicetype: str | None = None
    comment: str | None = None
    driverConfig: str | None = None
    productnumber: str | None = None
    vendorname: str | None = None
    classifier: dict[str, Any] | None = None
    hierarchyInstance: dict[str, Any] | None = None
    protocolType: dict[str, Any] | None = None


class ExternalCommand(Record):
    id: int
    name: str | None = None
    description: str | None = None
    cmd: str | None = None
    data: str | None = None
    fport: int | None = None
    device: Device | None = None


ParamKind = Literal["physical", "calculated", "signal"]
ParamList = Literal["physical", "calculated"]


@dataclass(frozen=True, slots=True)
class Parameter:
    """A parameter as the document shows it: its id and the list it came from; the rest is metadata."""

    id: int
    source: ParamList
    object_id: int | None  # None: listed by other filters, from a record that names no object
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def kind(self) -> ParamKind:
        # The document says records carry "the parameter type" but not its field; the emulator
        # and the platform we know of use "type". Anything else is treated as an ordinary physical one.
        if self.source == "physical" and str(self.meta.get("type", "")).lower() == "signal":
            return "signal"
        return self.source

    def raw(self) -> dict[str, Any]:
        """The record as it came, plus what we derived: the list it came from, its kind and object."""
        return {
            **self.meta,
            "id": self.id,
            "object_id": self.object_id,
            "list": self.source,
            "kind": self.kind,
        }


@dataclass(frozen=True, slots=True)
class Points:
    """A raw or averaged series, column-wise: epoch ms and values (NaN where the server sent none)."""

    ts: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(frozen=True, slots=True)
class Candles:
    ts: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)
