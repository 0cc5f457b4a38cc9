"""What the emulator answers: an Answer (body, status, headers), a Refusal (an error raised by any
handler), and sending them over ASGI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

JSON = b"application/json"


class Refusal(Exception):
    """An error answer: `status`, a short `code` and a human `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> bytes:
        return orjson.dumps({"error": self.code, "message": self.message, "status": self.status})


def not_found(what: str) -> Refusal:
    return Refusal(404, "not_found", f"{what} not found")


def bad(message: str) -> Refusal:
    return Refusal(400, "bad_request", message)


@dataclass
class Answer:
    body: bytes
    status: int = 200
    content_type: bytes = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


async def send_answer(send: Callable, answer: Answer) -> None:
    headers = [(b"content-type", answer.content_type), (b"content-length", b"%d" % len(answer.body)),
               *answer.headers]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


async def send_partial(send: Callable, answer: Answer) -> None:
    """Announce the whole body, send half of it, and return: uvicorn then closes the connection."""
    body = answer.body if len(answer.body) >= 2 else answer.body + b" " * 64
    headers = [(b"content-type", answer.content_type), (b"content-length", b"%d" % len(body)), *answer.headers]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})
