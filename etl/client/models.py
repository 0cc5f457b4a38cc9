"""Typed records of the shapes the document shows; everything else is kept as it came."""

from __future__ import annotations

import re
from collections.abc import Mapping
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
        raise ValueError(f"id {short_repr(value)} is not an integer")
    if not INT64[0] <= value <= INT64[1]:
        raise ValueError(f"id {short_repr(value)} is beyond 64 bits")
    return value


def short_repr(value: Any, size: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= size else text[: size - 3] + "..."


def one_line(exc: ValidationError) -> str:
    """The first problem of a validation error, on one line."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "record"
    return f"{where}: {first['msg']} (got {short_repr(first.get('input'))})"


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
# The document says parameter records carry "the parameter type" but names neither its field nor its values:
# the fields instances are seen to use, and the flags that mark a physical parameter as a signal.
TYPE_FIELDS = frozenset({"type", "paramtype", "parametertype"})
SIGNAL_FLAGS = frozenset({"signal", "issignal"})


def _true(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return value is True or (isinstance(value, int) and value == 1)


def type_name(value: Any) -> str | None:
    """The name a type field's value gives, lower case: text as it is, or an object `{id, name}` (the shape
    the document gives `protocolType` and a device's `classifier`) by its name, or by its id where the name
    is missing and the id is a word. A number names nothing: the document gives no type codes."""
    if isinstance(value, dict):
        named = value.get("name")
        value = named if isinstance(named, str) and named.strip() else value.get("id")
        if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
            return None
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip().lower()


def type_shape(record: Mapping[str, Any]) -> str | None:
    """How a record writes its type, in `etl init`'s words: "text", "object" ({id, name}), "object
    without a name", "number"; None when it names no type."""
    for key, value in record.items():
        if isinstance(key, str) and key.lower() in TYPE_FIELDS and value is not None:
            if isinstance(value, dict):
                return "object" if isinstance(value.get("name"), str) else "object without a name"
            return "number" if isinstance(value, int | float) and not isinstance(value, bool) else "text"
    return None


def param_kind(record: Mapping[str, Any], listed: ParamList | None = None) -> ParamKind | None:
    """A parameter record's kind, by the one rule every listing is read with. `listed`: the list the
    record came from (None: the search, which names none).

    A calculated parameter is one from the calculated list, or, from the search, one whose type says
    `calc...`. A physical one is a signal when any marker says so: a type of `signal` (in `type`,
    `paramType` or `parameterType`, any case, as text or as an object's name: `type_name`) or a true
    `signal`/`isSignal` flag. A search record that names no type has no kind (None): the lists must tell
    it."""
    types: list[str] = []
    flagged = False
    for key, value in record.items():
        name = key.lower() if isinstance(key, str) else ""
        if name in TYPE_FIELDS and (text := type_name(value)) is not None:
            types.append(text)
        elif name in SIGNAL_FLAGS:
            flagged = flagged or _true(value)
    if listed == "calculated" or (listed is None and any(t.startswith("calc") for t in types)):
        return ParamKind.CALCULATED
    if flagged or "signal" in types:
        return ParamKind.SIGNAL
    return ParamKind.PHYSICAL if listed is not None or types else None


@dataclass(frozen=True, slots=True)
class Parameter:
    """A parameter as the document shows it: its id and the list it came from; the rest is metadata."""

    id: int
    source: ParamList
    object_id: int | None  # None: listed by other filters, from a record that names no object
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def kind(self) -> ParamKind:
        return param_kind(self.meta, self.source) or ParamKind(self.source)

    @classmethod
    def listed_as(cls, kind: ParamKind) -> ParamList:
        """The list a parameter of this kind comes from (a signal is a physical parameter)."""
        return "calculated" if kind is ParamKind.CALCULATED else "physical"

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
class SearchPage:
    """One page of the paged parameter search: its records, and the whole listing's size when the server
    tells it. The document leaves the body open: a bare array, or an envelope (`{"total": N, "items":
    [...]}`, Spring's `{"content": [...], "totalElements": N, ...}`) read as the same page."""

    records: list[Any]
    total: int | None = None
    envelope: str | None = None  # the key the records came under; None: a bare array


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
