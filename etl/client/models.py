"""Typed records of the shapes the document shows; everything else is kept as it came."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from etl.model import ParamKind

INT64 = (-(2**63), 2**63 - 1)
# An identifier as the platform may write it (an integer, 5.0, "5"), within 64 bits: ids are int64 columns.
Id = Annotated[int, Field(ge=INT64[0], le=INT64[1])]
_DIGITS = re.compile(r"-?[0-9]+")


def record_id(value: Any) -> int:
    """An identifier as an int; ValueError saying why not (text, a fraction, beyond 64 bits, missing)."""
    if (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and _DIGITS.fullmatch(value.strip())
    ):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"id {_short(value)} is not an integer")
    if not INT64[0] <= value <= INT64[1]:
        raise ValueError(f"id {_short(value)} is beyond 64 bits")
    return value


def _short(value: Any, size: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= size else text[: size - 3] + "..."


def one_line(exc: ValidationError) -> str:
    """The first problem of a validation error, on one line."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "record"
    return f"{where}: {first['msg']} (got {_short(first.get('input'))})"


class Record(BaseModel):
    """Documented fields are typed; unknown fields are kept (extra="allow"), missing ones default."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def raw(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class UserState(Record):
    id: Id | None = None
    name: str | None = None
    comment: str | None = None


class User(Record):
    id: Id
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
    id: Id
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
    id: Id | None = None
    statename: str | None = None
    statecolor: str | None = None
    comment: str | None = None


class Device(Record):
    id: Id
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
    id: Id
    name: str | None = None
    description: str | None = None
    cmd: str | None = None
    data: str | None = None
    fport: int | None = None
    device: Device | None = None


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
            return ParamKind.SIGNAL
        return ParamKind(self.source)

    def raw(self) -> dict[str, Any]:
        """The record as it came, plus what we derived: the list it came from, its kind and object."""
        return {
            **self.meta,
            "id": self.id,
            "object_id": self.object_id,
            "list": self.source,
            "kind": self.kind.value,
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
