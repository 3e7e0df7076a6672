"""JSON from an untrusted file: limits checked on the bytes before any object is built.

`json.loads` builds every container and number a text holds, and recurses once per level:
a 4 MiB header of short nested lists became 48x its size in Python objects and took 19 s
to refuse, a 5,000-digit integer raised a bare `ValueError` (CPython's 4,300-digit limit),
deep nesting raised `RecursionError`. `load_json` first scans the bytes once, in chunks at
numpy speed and in bounded memory (8 KiB at a time), outside strings: nesting depth, the number of
containers (the objects that cost most per byte: an empty list is 56 bytes made of 3) and
the longest run of digits. Only then is the text parsed, on text whose object count
and depth are bounded by its size.

The parse is `json.loads` itself, reached through CPython's C scanner (`_json`), which
`json` wraps: importing `json` compiles six regular expressions (~2.5 ms of every
`rlx.load`) that reading a header never uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from rlx.errors import RlxError
from rlx.record import dataclass

__all__ = ["JsonLimits", "load_json", "scan_json"]

# Bytes scanned at a time. A chunk's temporaries stay resident in the allocator once
# freed: at 64 KiB, a dozen arrays of its length and int32 running sums held ~1.1 MiB of
# anonymous memory in every process that read a header over 64 KiB (issue 35). Once the
# numpy engine keeps freed memory (`rlx.runtime.heap`, from the first compile on) every
# later load keeps its peak too: at 8 KiB, with one int32 buffer reused for the sums and
# the masks combined in place, ~0.17 MiB (16 KiB chunks made anew: ~0.5 MiB), for ~7% more
# scan time on a 100 KB header and ~20% on 9 MB.
_CHUNK = 1 << 13
_SURROGATE_ESCAPE = rb"\\u[dD][89a-fA-F]"  # compiled on first use: few headers hold a \u
_WHITESPACE = " \t\n\r"  # JSON's four
_QUOTE, _OPEN, _OPEN_BRACE, _CLOSE, _CLOSE_BRACE = (ord(c) for c in '"[{]}')


@dataclass(frozen=True)
class JsonLimits:
    """What a JSON header may demand. The defaults allow 3x the container density of the
    densest real header measured (one `[` or `{` per 22 bytes: a baked captcha-crnn)."""

    max_depth: int = 64
    max_digits: int = 40  # longest number literal: 2**64 has 20 digits, a float repr 17
    bytes_per_container: int = 8
    free_containers: int = 4096  # small headers may be as dense as they like

    def max_containers(self, nbytes: int) -> int:
        return self.free_containers + nbytes // self.bytes_per_container


@dataclass(frozen=True)
class JsonShape:
    depth: int
    containers: int
    longest_number: int


def scan_json(raw: bytes) -> JsonShape:
    """Depth, container count and longest digit run of JSON text, outside its strings.

    Escapes go first (`\\\\` pairs, then `\\"`: JSON pairs a backslash with the byte after
    it), so every remaining quote opens or closes a string; a running parity of quotes then
    tells string bytes from the rest. Unbalanced text gives some figure: the parser that
    runs after refuses it anyway."""
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    view = np.frombuffer(text, np.uint8)
    parity = depth = deepest = containers = longest = run = 0
    for start in range(0, len(view), _CHUNK):
        chunk = view[start:start + _CHUNK]
        quote = chunk == _QUOTE
        # one int32 buffer for the chunk's running sums (quotes, then levels, then digits)
        # and one bool mask outside strings; the other temporaries are in place
        sums = np.cumsum(quote, dtype=np.int32)
        outside = (sums & 1).astype(bool)  # inside, counting this chunk's quotes only
        if parity:
            np.logical_not(outside, out=outside)
        parity = int(outside[-1])
        np.logical_or(outside, quote, out=outside)
        np.logical_not(outside, out=outside)
        opens = (chunk == _OPEN) | (chunk == _OPEN_BRACE)
        opens &= outside
        closes = (chunk == _CLOSE) | (chunk == _CLOSE_BRACE)
        closes &= outside
        np.cumsum(opens, dtype=np.int32, out=sums)
        sums -= np.cumsum(closes, dtype=np.int32)
        deepest = max(deepest, depth + int(sums.max()))
        depth += int(sums[-1])
        containers += int(np.count_nonzero(opens))
        digits = (chunk >= ord("0")) & (chunk <= ord("9"))
        digits &= outside
        np.cumsum(digits, dtype=np.int32, out=sums)
        starts = np.where(digits, 0, sums)  # digits so far where each run began
        np.maximum.accumulate(starts, out=starts)
        sums -= starts
        lead = len(chunk) if digits.all() else int(np.argmin(digits))  # a run going on
        run = run if lead else 0
        longest = max(longest, int(sums.max()), run + lead)
        run = int(sums[-1]) + (run if lead == len(chunk) else 0)
    return JsonShape(deepest, containers, longest)


def load_json(raw: bytes, error: type[RlxError], where: str,
              limits: JsonLimits = JsonLimits(),
              object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None, *,
              lazy: tuple[tuple[str, ...], ...] = ()) -> Any:
    """`raw` parsed, or `error(f"{where}: ...")` if it is not UTF-8 JSON within `limits`.

    `lazy`: paths of object keys down to arrays ((("graph", "nodes"), ("weights",))), each
    of which comes back as an iterator of its elements, each parsed when it is reached
    (every element is checked here, parsed and dropped, so the iterator cannot fail). Why:
    a reader that turns each element into something smaller (a graph node, a weight row)
    then never holds all of them parsed: a 413-node header parsed whole is ~0.6 MiB of
    Python objects, whose peak the allocator keeps resident (issue 35). Where the text
    holds a `\\u` surrogate escape, or another Python has no C scanner, the arrays are
    parsed whole (lists)."""
    shape = scan_json(raw)
    problem = None
    if shape.depth > limits.max_depth:
        problem = f"nests deeper than {limits.max_depth} levels"
    elif shape.containers > limits.max_containers(len(raw)):
        problem = (f"holds {shape.containers} arrays and objects in {len(raw)} bytes (at most "
                   f"{limits.max_containers(len(raw))})")
    elif shape.longest_number > limits.max_digits:
        problem = f"holds a number of {shape.longest_number} digits (at most {limits.max_digits})"
    else:
        try:
            # pairs are fine, a lone one is no character
            escaped = b"\\u" in raw and re.search(_SURROGATE_ESCAPE, raw) is not None
            value = _loads(raw.decode("utf-8"), object_pairs_hook, () if escaped else lazy)
            if escaped:
                import json

                json.dumps(value, ensure_ascii=False).encode("utf-8")
            return value
        except UnicodeEncodeError:
            problem = "holds a lone surrogate escape (\\ud800-\\udfff), which is no character"
        except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError
            problem = f"is not valid JSON: {' '.join(str(err).split())[:200]}"
    raise error(f"{where} {problem}")


class _Options:
    """What the C scanner reads off a `json.JSONDecoder`: its defaults, and the hook."""

    strict = True
    object_hook = None
    parse_float, parse_int = float, int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                      "-Infinity": float("-inf")}.__getitem__

    def __init__(self, object_pairs_hook: Callable | None) -> None:
        self.object_pairs_hook = object_pairs_hook


def _loads(text: str, object_pairs_hook: Callable | None,
           lazy: tuple[tuple[str, ...], ...] = ()) -> Any:
    """`json.loads(text, object_pairs_hook=...)` without importing `json` (where CPython's
    C scanner is there: elsewhere it is `json.loads`), the arrays at the `lazy` paths left
    to parse as they are iterated (`load_json`). Raises ValueError as `json.loads` does."""
    try:
        from _json import make_scanner
    except ImportError:  # another Python: its own json
        import json

        return json.loads(text, object_pairs_hook=object_pairs_hook)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        scan = make_scanner(_Options(object_pairs_hook))  # type: ignore[arg-type]
        value, end = _walk(scan, text, start, lazy) if lazy else scan(text, start)
    except StopIteration:
        raise ValueError(f"Expecting value: char {start}") from None
    if end != len(text.rstrip(_WHITESPACE)):
        raise ValueError(f"Extra data: char {end}")
    return value


def _space(text: str, i: int) -> int:
    """The index of the first byte from `i` on that is not JSON whitespace."""
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def _walk(scan: Callable, text: str, i: int, paths: tuple[tuple[str, ...], ...]
          ) -> tuple[Any, int]:
    """(value, index after it) of the JSON value at `i`, as `scan` parses it, but for the
    objects along `paths`, read key by key, and the array at the end of each, an
    iterator."""
    if () in paths:
        if text[i:i + 1] != "[":
            return scan(text, i)
        checked = _elements(scan, text, i)
        while True:  # each element parses: the iterator's second pass cannot fail
            try:
                next(checked)
            except StopIteration as done:
                return _elements(scan, text, i), done.value
    if text[i:i + 1] != "{":
        return scan(text, i)
    out: dict[str, Any] = {}
    i = _space(text, i + 1)
    if text[i:i + 1] == "}":
        return out, i + 1
    while True:
        if text[i:i + 1] != '"':
            raise ValueError(f"Expecting property name enclosed in double quotes: char {i}")
        key, i = scan(text, i)
        i = _space(text, i)
        if text[i:i + 1] != ":":
            raise ValueError(f"Expecting ':' delimiter: char {i}")
        i = _space(text, i + 1)
        below = tuple(path[1:] for path in paths if path[0] == key)
        out[key], i = _walk(scan, text, i, below) if below else scan(text, i)
        i = _space(text, i)
        if text[i:i + 1] == "}":
            return out, i + 1
        if text[i:i + 1] != ",":
            raise ValueError(f"Expecting ',' delimiter: char {i}")
        i = _space(text, i + 1)


def _elements(scan: Callable, text: str, i: int) -> Generator[Any, None, int]:
    """The elements of the array opening at `i`, parsed one at a time; returns (as
    `StopIteration.value`) the index after its `]`."""
    i = _space(text, i + 1)
    if text[i:i + 1] == "]":
        return i + 1
    while True:
        try:
            value, i = scan(text, i)
        except StopIteration:  # in a generator it would become a RuntimeError
            raise ValueError(f"Expecting value: char {i}") from None
        yield value
        i = _space(text, i)
        if text[i:i + 1] == "]":
            return i + 1
        if text[i:i + 1] != ",":
            raise ValueError(f"Expecting ',' delimiter: char {i}")
        i = _space(text, i + 1)
