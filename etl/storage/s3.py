"""S3 requests a plain filesystem does not make: reads that return the ETag, and writes conditional on
it (If-Match / If-None-Match), the compare-and-swap behind every rewrite on S3. Async, on s3fs' client."""

from __future__ import annotations

import errno
from typing import IO, Any, cast

CHUNK = 1 << 20


class ConditionsUnsupported(Exception):
    """The store answered 501 Not Implemented to a conditional write."""


async def get(fs: Any, bucket: str, key: str) -> tuple[bytes | None, str | None]:
    try:
        answer = await fs._call_s3("get_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None, None
    try:
        return await answer["Body"].read(), answer["ETag"]
    finally:
        answer["Body"].close()


async def download(fs: Any, bucket: str, key: str, spool: str) -> str | None:
    """The object into a local file, chunk by chunk; its ETag (None: no such object)."""
    try:
        answer = await fs._call_s3("get_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None
    try:
        with open(spool, "wb") as out:
            while chunk := await answer["Body"].read(CHUNK):
                out.write(chunk)
        return cast(str, answer["ETag"])
    finally:
        answer["Body"].close()


async def put_if(
    fs: Any, bucket: str, key: str, body: bytes | IO[bytes] | None, etag: str | None, conditional: bool
) -> bool:
    """Write (None: delete) if the object is still the version `etag` names (None: absent). False when it
    is not."""
    condition = ({"IfMatch": etag} if etag else {"IfNoneMatch": "*"}) if conditional else {}
    try:
        if body is None:
            if etag is not None:
                await fs._call_s3("delete_object", Bucket=bucket, Key=key, **condition)
        else:
            await fs._call_s3("put_object", Bucket=bucket, Key=key, Body=body, **condition)
    except (FileExistsError, FileNotFoundError):
        return False  # If-None-Match failed, or If-Match on an object deleted meanwhile
    except OSError as exc:
        if _precondition_failed(exc):
            return False
        if conditional and _status(exc) == 501:
            raise ConditionsUnsupported from exc
        raise
    return True


def _status(exc: OSError) -> int | None:
    response = getattr(exc.__cause__, "response", None) or {}
    return cast(int | None, response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


def _precondition_failed(exc: OSError) -> bool:
    response = getattr(exc.__cause__, "response", None) or {}
    code = response.get("Error", {}).get("Code")
    # 409 ConditionalRequestConflict: two conditional writes raced on AWS; the loser may retry.
    return (
        _status(exc) in (409, 412)
        or code in ("PreconditionFailed", "ConditionalRequestConflict")
        or (exc.errno == errno.EINVAL and "pre-condition" in str(exc).lower())
    )
