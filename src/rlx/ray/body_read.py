"""Reading a request body with a size cap and a deadline, so a slow or endless upload costs
the replica a bounded wait and bounded memory.

A client that sends its headers and then stalls would otherwise hold one of the replica's
request slots for as long as it likes (five such clients took a server down), and one
that sends without end would fill its memory. The declared `Content-Length` is checked
before a byte is read; the bytes are counted as they come; the whole read has
`timeout_s`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from rlx.ray.errors import RequestError

__all__ = ["BODY_TIMEOUT_S", "read_body"]

BODY_TIMEOUT_S = 30.0
"""Seconds a request's body may take to arrive in full (a 1 GiB .npz over a 1 Gbit/s link
takes ~9 s)."""


async def read_body(chunks: AsyncIterator[bytes], declared: str | None, limit: int,
                    timeout_s: float) -> bytes:
    """The body, at most `limit` bytes (413 past it), within `timeout_s` (408 after)."""
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            length = -1
        if length < 0:
            raise RequestError(f"Content-Length {declared[:40]!r} is not a byte count")
        if length > limit:
            raise RequestError(f"the request body declares {length:,} bytes, more than the "
                               f"{limit:,} this content type may hold", 413)
    parts: list[bytes] = []

    async def gather() -> None:
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise RequestError(f"the request body holds more than the {limit:,} bytes "
                                   "this content type may hold", 413)
            parts.append(chunk)

    try:
        await asyncio.wait_for(gather(), timeout_s)
    except asyncio.TimeoutError:
        came = sum(len(part) for part in parts)
        raise RequestError(f"the request body did not arrive within {timeout_s:g} s "
                           f"({came:,} bytes came)", 408) from None
    return b"".join(parts)
