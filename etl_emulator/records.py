"""The platform's records (objects, units, parameters, commands, users, lookups) and parameter
statuses: pure functions of the Dataset and the ids, built when asked for."""

from __future__ import annotations

from typing import Any

from etl_emulator.answers import Record
from etl_emulator.dataset import CALC_OFFSET, DEVICES_PER_OBJECT, HOUR_MS, TIMEZONES, Dataset, Param

STATUSES = {
    "none": {"id": 1, "statename": "No data", "statecolor": "none", "comment": "no value in the last hours"},
    "normal": {"id": 2, "statename": "Normal", "statecolor": "normal", "comment": "within limits"},
    "warning": {"id": 3, "statename": "Warning", "statecolor": "warning", "comment": "near a limit"},
    "error": {"id": 4, "statename": "Error", "statecolor": "error", "comment": "limit exceeded"},
    "critical": {"id": 5, "statename": "Critical", "statecolor": "critical", "comment": "far beyond a limit"},
}


def status_lookback_ms(p: Param) -> int:
    """How far back the last value is searched for (longer than any gap plus two periods)."""
    return 2 * HOUR_MS + 2 * p.period_ms


def status_of(p: Param, value: float | None) -> Record:
    """The status record for a parameter whose last value is `value` (None: no value)."""
    if value is None or value != value:
        name = "none"
    elif p.kind == "signal":
        name = "warning" if value else "normal"
    else:
        z = abs(value - p.base) / p.amp
        name = "normal" if z < 0.8 else "warning" if z < 0.95 else "error" if z < 1.05 else "critical"
    return STATUSES[name]


ANALOG_KINDS = (
    ("temperature", "°C"),
    ("pressure", "kPa"),
    ("humidity", "%"),
    ("power", "kW"),
    ("flow", "m3/h"),
)
OBJECT_STATES = {
    1: {"id": 1, "objstatename": "new", "comment": "no controller installed or configured"},
    2: {"id": 2, "objstatename": "active", "comment": "controllers online"},
}
ZONES = [{"id": 1, "name": "North"}, {"id": 2, "name": "South"}, {"id": 3, "name": "East"}]
CLASSIFIERS = [
    {"id": 1, "name": "sensor", "description": "measuring sensor", "sys": True},
    {"id": 2, "name": "meter", "description": "utility meter", "sys": True},
    {"id": 3, "name": "actuator", "description": "valve or relay", "sys": False},
]
ROOM_TYPES: list[dict[str, Any]] = [{"id": 1, "name": "office"}, {"id": 2, "name": "plant room"}]
USER_LOCALE = "en"
TYPE_IDS = {"analog": 1, "calculated": 2, "signal": 3}  # a type written as an object {id, name}


def object_state(ds: Dataset, object_id: int) -> int:
    """1 ("new": no controller) for every third object and those lateness.py names; 2 otherwise."""
    return 1 if object_id % 3 == 0 or object_id in ds.lateness.no_controller else 2


def object_short(object_id: int) -> Record:
    return {"id": object_id, "shortname": f"obj-{object_id}"}


def _identity(ds: Dataset, pid: int) -> tuple[str, int, int]:
    """(kind, object id, j) by arithmetic: records need none of the hashed constants."""
    kind = ds.kind(pid)
    if kind is None:
        raise KeyError(f"no parameter {pid} in {ds}")
    object_id, rest = divmod(pid, 1000)
    return kind, object_id, rest - CALC_OFFSET if kind == "calculated" else rest


def _tags(kind: str, j: int) -> list[str]:
    if kind == "signal":
        return ["alarm"]
    if kind == "calculated":
        return ["energy", "calculated"]
    return [ANALOG_KINDS[(j - 1) % len(ANALOG_KINDS)][0]]


def object_full(ds: Dataset, object_id: int, now: int | None = None) -> Record:
    """An object's full record; its controllers offline at `now` are counted (lateness.py's outages)."""
    tz = TIMEZONES[(object_id - 1) % len(TIMEZONES)]
    state = object_state(ds, object_id)
    controllers = [object_id * 10 + d for d in range(1, DEVICES_PER_OBJECT + 1)]
    identities = [_identity(ds, pid) for pid in ds.physical_ids(object_id) + ds.calc_ids(object_id)]
    tags = sorted({t for kind, _, j in identities for t in _tags(kind, j)})
    return {
        "id": object_id,
        "shortname": f"obj-{object_id}",
        "fullname": f"Object {object_id}",
        "comment": "",
        "zipcode": f"{100000 + object_id}",
        "timezone": tz,
        "area": 1000.0 + 250.5 * object_id,
        "latitude": round(40 + (object_id * 7.31) % 20, 4),
        "longitude": round(-100 + (object_id * 13.7) % 200, 4),
        "employees": 10 * object_id,
        "objrubric": {"id": 1 + object_id % 2, "shortname": "office" if object_id % 2 else "plant"},
        "sdirobjectstate": OBJECT_STATES[state],
        "worstparamstate": STATUSES["normal"] if state == 2 else STATUSES["none"],
        "worstparamcount": 0,
        "paramtags": tags,
        "calendar": {"id": 1, "name": "default", "description": "Mon-Fri working days"},
        "address": f"{object_id} Main Street",
        "controllersTotalCount": 0 if state == 1 else DEVICES_PER_OBJECT,
        "controllersOfflineCount": 0 if state == 1 else ds.lateness.offline_controllers(controllers, now),
        "attrs": {"region": "north" if object_id % 2 else "south"},
    }


def object_by_id(ds: Dataset, object_id: int, now: int | None = None) -> Record:
    """The by-id answer: the full record, plus an operating mode for even ids."""
    record = object_full(ds, object_id, now)
    if object_id % 2 == 0:
        record["operatingMode"] = {"id": 1, "name": "auto"}
    return record


def units(object_id: int) -> list[Record]:
    out = []
    for d in range(1, DEVICES_PER_OBJECT + 1):
        device_id, controller_id = object_id * 100 + d, object_id * 10 + d
        out.append(
            {
                "id": device_id,
                "name": f"unit-{device_id}",
                "deviceconnect": {
                    "id": device_id * 10,
                    "controller": {"id": controller_id, "name": f"controller-{controller_id}"},
                    "device": {"id": device_id, "devicename": f"device-{device_id}"},
                },
            }
        )
    return out


def rooms(object_id: int) -> list[Record]:
    return [
        {
            "id": object_id * 10 + t["id"],
            "name": f"{t['name']} {object_id}",
            "objectId": object_id,
            "sensorLocationId": t["id"],
        }
        for t in ROOM_TYPES
    ]


def param_record(ds: Dataset, pid: int) -> Record:
    """The full record of a parameter (KeyError when there is none)."""
    kind, object_id, j = _identity(ds, pid)
    d = 1 + (j - 1) % DEVICES_PER_OBJECT
    tags = _tags(kind, j)
    if kind == "calculated":
        return {
            "id": pid,
            "name": f"calc-{pid}",
            "type": "calculated",
            "objectId": object_id,
            "controllerId": object_id * 10 + d,
            "unit": "kWh",
            "tags": tags,
            "formula": f"sum(p{object_id * 1000 + 1}) * 0.25",
        }
    name, unit = ("alarm", "") if kind == "signal" else ANALOG_KINDS[(j - 1) % len(ANALOG_KINDS)]
    return {
        "id": pid,
        "name": f"{name}-{pid}",
        "type": kind,
        "objectId": object_id,
        "controllerId": object_id * 10 + d,
        "deviceId": object_id * 100 + d,
        "unit": unit,
        "tags": tags,
        "ctrability": j % 2 == 1,
        "locked": j % 3 == 0,
        "roomId": object_id * 10 + 1 + (j - 1) % len(ROOM_TYPES),
        "deviceClassifierId": 1 + (j - 1) % len(CLASSIFIERS),
    }


def marked(
    record: dict[str, Any], type_field: str = "type", signal_marker: str = "type", type_shape: str = "text"
) -> dict[str, Any]:
    """A parameter record as a server with these choices writes it: its type under `type_field`; a signal
    parameter marked by its type ("type": `"type": "signal"`) or as a physical one with a flag ("flag":
    `"type": "analog", "signal": true`, every other physical record `"signal": false`); the type as text
    or as an object ("object": `{"id": 2, "name": "calculated"}`, ids in TYPE_IDS)."""
    kind = record["type"]
    if signal_marker == "flag" and kind != "calculated":
        record = {**record, "type": "analog", "signal": kind == "signal"}
    if type_shape == "object":
        record = {**record, "type": {"id": TYPE_IDS[record["type"]], "name": record["type"]}}
    if type_field != "type":
        record = {(type_field if k == "type" else k): v for k, v in record.items()}
    return record


def param_short(record: Record) -> Record:
    return {"id": record["id"], "name": record["name"]}


def ext_commands(device_id: int) -> list[Record]:
    object_id, d = divmod(device_id, 100)
    device = {
        "id": device_id,
        "devicename": f"device-{device_id}",
        "devicetopic": f"site/{object_id}/dev/{device_id}",
        "devicetype": "LORAWAN" if d == 1 else "MQTT",
        "comment": "",
        "driverConfig": "{}",
        "productnumber": f"PN-{device_id:06d}",
        "vendorname": "Acme",
        "classifier": CLASSIFIERS[(d - 1) % len(CLASSIFIERS)],
        "hierarchyInstance": {
            "id": object_id,
            "hierarchyId": f"h-{object_id}",
            "name": f"Object {object_id}",
        },
        "protocolType": {"id": "lora" if d == 1 else "mqtt", "name": "LoRaWAN" if d == 1 else "MQTT"},
    }
    return [
        {
            "id": device_id * 10 + 1,
            "name": "reboot",
            "description": "restart the device",
            "cmd": "REBOOT",
            "data": "",
            "fport": 2,
            "device": device,
        },
        {
            "id": device_id * 10 + 2,
            "name": "set-interval",
            "description": "set the reporting interval",
            "cmd": "SETINT",
            "data": "interval=60",
            "fport": 3,
            "device": device,
        },
    ]


def user_record(index: int, login: str, control: bool = True) -> Record:
    return {
        "id": index + 1,
        "login": login,
        "firstname": login.title(),
        "lastname": "User",
        "middlename": "",
        "state": {"id": 1, "name": "active", "comment": "the user is active and may sign in"},
        "theme": 1,
        "ilocale": USER_LOCALE,
        "defaultScreen": 1,
        "soundOn": False,
        "comment": None,
        "authService": "LOCAL",
        "privileges": [{"id": 1, "name": "read"}, *([{"id": 2, "name": "control"}] if control else [])],
    }
