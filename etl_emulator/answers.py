"""What the emulator answers: an Answer (body, status, headers), a Refusal (an error raised by any
handler), the styles of error bodies and the envelopes of a page, reading request bodies and sending
answers over ASGI."""

from __future__ import annotations

import asyncio
import base64
import html
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

import orjson

Record = dict[str, Any]  # a JSON object the emulator answers with, reads or logs
# ASGI's: the connection's scope, and the messages the server receives and sends.
Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = b"application/json"
HTML = b"text/html; charset=utf-8"
TEXT = b"text/plain; charset=utf-8"


class Refusal(Exception):
    """An error answer: `status`, a short `code` and a human `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> bytes:
        return orjson.dumps({"error": self.code, "message": self.message, "status": self.status})


def envelope(kind: str, array: bytes, size: int, total: int, limit: int, offset: int) -> bytes:
    """A page of the search (`array`, its JSON, of `size` records out of `total`) in the envelope a
    server chose: "array" as it is, "items" `{"total": N, "items": [...]}`, "spring" Spring's `Page`
    (`{"content": [...], "totalElements": N, "pageable": {...}, ...}`), "data" `{"data": [...]}`."""
    if kind == "array":
        return array
    if kind == "items":
        return b'{"total":%d,"items":%s}' % (total, array)
    if kind == "data":
        return b'{"data":%s}' % array
    number = offset // limit if limit else 0
    sort = {"empty": True, "sorted": False, "unsorted": True}
    page = {
        "pageable": {
            "pageNumber": number,
            "pageSize": limit,
            "offset": offset,
            "sort": sort,
            "paged": True,
            "unpaged": False,
        },
        "last": offset + size >= total,
        "totalPages": -(-total // limit) if limit else 0,
        "totalElements": total,
        "size": limit,
        "number": number,
        "sort": sort,
        "first": offset == 0,
        "numberOfElements": size,
        "empty": size == 0,
    }
    return b'{"content":%s,%s' % (array, orjson.dumps(page)[1:])


def not_found(what: str) -> Refusal:
    return Refusal(404, "not_found", f"{what} not found")


def bad(message: str) -> Refusal:
    return Refusal(400, "bad_request", message)


@dataclass
class Answer:
    body: bytes
    status: int = 200
    content_type: bytes | None = JSON  # None: no content-type header (an empty body)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    # A body sent as it is made, chunked (no content-length), instead of `body`: slow or endless ones.
    stream: Callable[[], AsyncIterator[bytes]] | None = None


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def error_page(status: int) -> bytes:
    """The HTML page of a failing proxy or application server (no detail of the cause)."""
    return (
        f"<!DOCTYPE html><html><head><title>{status} Error</title></head><body><h1>{status}</h1>"
        "<p>The server encountered a temporary error and could not complete your request.</p>"
        "</body></html>"
    ).encode()


def refused(refusal: Refusal, style: str, headers: list[tuple[bytes, bytes]] | None = None) -> Answer:
    """The answer of a refusal in an error-body style: json (`{"error", "message", "status"}`), html (a
    page with the status and the message), text (one line) or empty (no body, no content type)."""
    status, message = refusal.status, refusal.message
    if style == "json":
        body, content_type = refusal.body(), JSON
    elif style == "html":
        title = f"{status} {_reason(status)}"
        body = (
            f"<!DOCTYPE html><html><head><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>{html.escape(message)}</p></body></html>"
        ).encode()
        content_type = HTML
    elif style == "text":
        body, content_type = f"{status} {_reason(status)}: {message}\n".encode(), TEXT
    else:
        body, content_type = b"", None
    return Answer(body, status, content_type, headers or [])


def echoing(answer: Answer, style: str, query: bytes, form: bytes) -> Answer:
    """An error answer that repeats the request's fields (query string and form body, sorted by name), as
    some servers' error pages do, in an echo style, first thing in the body: what a client must not
    print. `query`: the values as received, percent-encoding and all, in JSON; the others show the fields
    decoded (`name=value&...`) as text (`raw`), with the spaces and every other sign percent-encoded
    (`partial`), in base64 (`base64`), as the HTTP Basic credentials of the username and password
    (`basic`), in JSON with every sign `\\u`-escaped (`json-unicode`) or in an HTML page (`html`: named,
    decimal and hex references)."""
    status, headers = answer.status, answer.headers
    parts = sorted(part for part in (query + b"&" + form).split(b"&") if part)
    if style == "query":
        received = dict(part.decode("latin-1").partition("=")[::2] for part in parts)
        return Answer(orjson.dumps({"params": received, "status": status}), status, JSON, headers)
    fields = parse_qsl(b"&".join(parts).decode("utf-8", "replace"), keep_blank_values=True)
    encode = _partly_encoded if style == "partial" else str
    text = "&".join(f"{name}={encode(value)}" for name, value in fields)
    if style in ("raw", "partial"):
        return Answer(f"{text} ({status} {_reason(status)})\n".encode(), status, TEXT, headers)
    if style == "html":
        return Answer(f"<html><body><p>{_html(text)}</p></body></html>".encode(), status, HTML, headers)
    if style == "basic":
        values = dict(fields)
        if "username" not in values or "password" not in values:
            return answer
        text = "Basic " + base64.b64encode(f"{values['username']}:{values['password']}".encode()).decode()
    elif style == "base64":
        text = base64.b64encode(text.encode()).decode()
    if style == "json-unicode":
        escaped = "".join(c if c.isascii() and c.isalnum() else _unicode_escaped(c) for c in text)
        return Answer(f'{{"message":"{escaped}","status":{status}}}'.encode(), status, JSON, headers)
    return Answer(orjson.dumps({"message": text, "status": status}), status, JSON, headers)


def _partly_encoded(value: str) -> str:
    """The value with its spaces and every other sign percent-encoded (lower-case hex), the rest as it is."""
    signs = [i for i, c in enumerate(value) if not c.isalnum() and c != " "]
    encoded = set(signs[::2])
    return "".join(
        "%20" if c == " " else "".join(f"%{b:02x}" for b in c.encode()) if i in encoded else c
        for i, c in enumerate(value)
    )


def _html(text: str) -> str:
    """Text in a page: the signs html.escape names by their names, the others by turns as decimal and hex
    references."""
    out: list[str] = []
    turn = 0
    for c in text:
        if c.isalnum() or c == " ":
            out.append(c)
        elif c in "&<>\"'":
            out.append(html.escape(c))
        else:
            out.append(f"&#{ord(c)};" if turn % 2 == 0 else f"&#x{ord(c):X};")
            turn += 1
    return "".join(out)


def _unicode_escaped(c: str) -> str:
    return json.dumps(c)[1:-1] if ord(c) > 0xFFFF else f"\\u{ord(c):04x}"


async def read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        chunk: bytes = message.get("body", b"")
        body += chunk
        if not message.get("more_body"):
            return body


def _head(answer: Answer, length: int) -> Message:
    headers = [(b"content-length", b"%d" % length), *answer.headers]
    if answer.content_type is not None:
        headers.insert(0, (b"content-type", answer.content_type))
    return {"type": "http.response.start", "status": answer.status, "headers": headers}


async def send_answer(send: Send, answer: Answer, receive: Receive | None = None) -> None:
    if answer.stream is not None and receive is not None:
        await _send_stream(send, receive, answer)
        return
    await send(_head(answer, len(answer.body)))
    await send({"type": "http.response.body", "body": answer.body})


async def _send_stream(send: Send, receive: Receive, answer: Answer) -> None:
    """Chunks of `answer.stream` until it ends or the client goes away (uvicorn then drops what is
    sent without a word, so the disconnect is watched for)."""
    assert answer.stream is not None
    head = _head(answer, 0)
    head["headers"] = [h for h in head["headers"] if h[0] != b"content-length"]
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.ensure_future(watch())
    try:
        await send(head)
        async for chunk in answer.stream():
            if gone.is_set():
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        watcher.cancel()


async def send_partial(send: Send, answer: Answer) -> None:
    """Announce the whole body, send half of it, and return: uvicorn then closes the connection."""
    body = answer.body if len(answer.body) >= 2 else answer.body + b" " * 64
    await send(_head(answer, len(body)))
    await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})
