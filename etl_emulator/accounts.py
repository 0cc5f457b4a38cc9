"""Accounts: the logins the emulator accepts, the objects each sees and whether it may act."""

from __future__ import annotations

from dataclasses import dataclass

from etl_emulator.answers import Record, Refusal


@dataclass
class Account:
    """A login the emulator accepts, and what it may see and do."""

    index: int
    login: str
    password: str
    objects: frozenset[int] | None  # None: every object
    control: bool = True  # may set values and run commands

    def sees(self, object_id: int) -> bool:
        return self.objects is None or object_id in self.objects

    def require_control(self) -> None:
        if not self.control:
            raise Refusal(403, "forbidden", f"login {self.login!r} may read but not act on equipment")


def accounts(users: list[Record] | None, object_ids: range) -> dict[str, Account]:
    """Accounts by login from {login, password, objects: "all" | [ids], control} entries (None: the
    default demo and restricted logins)."""
    if users is None:
        users = [
            {"login": "demo", "password": "demo", "objects": "all"},
            {
                "login": "restricted",
                "password": "restricted",
                "objects": [i for i in object_ids if i % 2],
                "control": False,
            },
        ]
    out: dict[str, Account] = {}
    for i, u in enumerate(users):
        objects = u.get("objects", "all")
        out[str(u["login"])] = Account(
            i,
            str(u["login"]),
            str(u["password"]),
            None if objects == "all" else frozenset(int(o) for o in objects),
            bool(u.get("control", True)),
        )
    return out
