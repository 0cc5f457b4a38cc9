"""Sign-in and sessions.

A session id carries its account and sign-in time, and its issToken is the id's HMAC under a secret:
any worker process sharing the secret accepts a session another one opened. What a process adds
(requests served, spent) lives in its own table.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass

import orjson

from etl_emulator import records
from etl_emulator.accounts import Account
from etl_emulator.answers import HTML, Answer, Refusal, refused
from etl_emulator.faults import FaultPlan
from etl_emulator.routing import Call

SECRET_ENV = "ETL_EMULATOR_SECRET"  # shared by worker processes


class SessionEnded(Refusal):
    """A call without a live session: missing or unknown cookies, a wrong token, an expired session."""

    def __init__(self, message: str) -> None:
        super().__init__(401, "unauthorized", message)


def login_page(base_path: str) -> bytes:
    return (
        f"<!DOCTYPE html><html><head><title>Sign in</title></head><body><h1>Sign in</h1>"
        f'<form method="post" action="{base_path}/auth/login">'
        '<label>Login <input type="text" name="username"></label>'
        '<label>Password <input type="password" name="password"></label>'
        '<button type="submit">Sign in</button></form></body></html>'
    ).encode()


def session_end_answer(ended: SessionEnded, choice: str, base_path: str, error_body: str) -> Answer:
    """How a call without a live session is answered (faults.SESSION_ENDS): 401 or 403 with an error
    body, a redirect to the sign-in page or to the root, or the sign-in page itself with 200."""
    if choice == "401":
        return refused(ended, error_body)
    if choice == "403":
        return refused(Refusal(403, "forbidden", ended.message), error_body)
    if choice == "html-login":
        return Answer(login_page(base_path), 200, HTML)
    location = f"{base_path}/login" if choice == "302-login" else "/"
    return Answer(b"", 302, None, [(b"location", location.encode())])


@dataclass
class ServerSession:
    """What this process knows of a session: the rest is in its signed id."""

    account: Account
    token: str
    created: float  # epoch seconds
    served: int = 0
    spent: bool = False


def _cookies(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    cookies = {}
    for name, value in headers:
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                k, _, v = part.strip().partition("=")
                cookies[k] = v
    return cookies


# Sessions kept per process. A soak with short sessions signs in without end; an evicted session's
# cookies are still trusted by their HMAC (as another worker's would be), with a fresh request count.
LIVE_MAX = 10_000


class Sessions:
    """Signs accounts in and checks the session cookies of every other call."""

    def __init__(self, accounts: dict[str, Account], base_path: str, plan: FaultPlan) -> None:
        self.accounts = accounts
        self.base_path = base_path
        self.plan = plan
        self.secret = os.environ.get(SECRET_ENV, "").encode() or secrets.token_bytes(32)
        self.live: dict[str, ServerSession] = {}

    def _token(self, sid: str) -> str:
        return hmac.new(self.secret, sid.encode(), hashlib.sha256).hexdigest()

    def _known(self, sid: str, token: str) -> ServerSession | None:
        """A session opened by another worker process: trusted when its token is the id's HMAC."""
        if len(sid) != 44 or not hmac.compare_digest(self._token(sid).encode(), token.encode()):
            return None
        index, created_ms = int(sid[24:32], 16), int(sid[32:], 16)
        account = next((a for a in self.accounts.values() if a.index == index), None)
        if account is None:
            return None
        return self._keep(sid, ServerSession(account, self._token(sid), created_ms / 1000))

    def _keep(self, sid: str, session: ServerSession) -> ServerSession:
        self.live[sid] = session
        while len(self.live) > LIVE_MAX:  # the oldest go first (dicts keep insertion order)
            del self.live[next(iter(self.live))]
        return session

    def _credential(self, call: Call, name: str) -> str:
        """From the form body or the query string, as `sign_in_via` allows (the body first)."""
        sources = {"both": (call.form, call.query), "form": (call.form,), "query": (call.query,)}
        return next(
            (values[-1] for source in sources[self.plan.faults.sign_in_via] if (values := source.get(name))),
            "",
        )

    def sign_in(self, call: Call) -> Answer:
        account = self.accounts.get(self._credential(call, "username"))
        password = self._credential(call, "password")
        if account is None or not hmac.compare_digest(account.password.encode(), password.encode()):
            raise Refusal(401, "bad_credentials", "wrong login or password")
        created = time.time()
        sid = f"{secrets.token_hex(12)}{account.index:08x}{int(created * 1000):012x}"
        token = self._token(sid)
        self._keep(sid, ServerSession(account, token, created))
        base = self.base_path or "/"
        cookies = [
            f"SEMSESSIONID={sid}; Path=/; HttpOnly; SameSite=lax",
            f"rememberMe=deleteMe; Path={base}; Max-Age=0; SameSite=lax",
            f"language={records.USER_LOCALE}; Path={base}",
            f"issToken={token}; Path=/",
        ]
        headers = [(b"set-cookie", c.encode()) for c in cookies]
        headers.append((b"access-control-allow-credentials", b"true"))
        body = orjson.dumps(records.user_record(account.index, account.login, account.control))
        return Answer(body, headers=headers)

    def check(self, headers: list[tuple[bytes, bytes]]) -> Account:
        """The account of a live session named by the cookies, counting this request against it."""
        faults = self.plan.faults
        cookies = _cookies(headers)
        sid = cookies.get("SEMSESSIONID", "")
        session = self.live.get(sid) or self._known(sid, cookies.get("issToken", ""))
        if session is None or session.spent:
            raise SessionEnded(
                "sign in first: the SEMSESSIONID and issToken cookies are missing, unknown or expired"
            )
        if not hmac.compare_digest(session.token.encode(), cookies.get("issToken", "").encode()):
            raise SessionEnded("the issToken cookie does not belong to this session")
        if faults.session_max_age is not None and time.time() - session.created > faults.session_max_age:
            session.spent = True
            raise SessionEnded("session expired")
        session.served += 1
        if faults.session_max_requests is not None and session.served >= faults.session_max_requests:
            session.spent = True  # this request is served; the next one is refused
        return session.account
