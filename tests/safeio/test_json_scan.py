"""The JSON scan runs on the header bytes before parsing; its depth, container count and
longest number must agree with the parsed JSON on any text json.dumps writes, whatever its
strings hold (brackets, quotes, backslashes, digits, non-ASCII), and across its 64 KiB
chunks."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from rlx.errors import ArtifactError
from rlx.safeio import json_scan
from rlx.safeio.json_scan import JsonLimits, load_json, scan_json

ALPHABET = ['[', ']', '{', '}', '"', '\\', 'a', ' ', '\n', 'é', '7']


def _reference(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_reference, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_reference, value), default=0)
    return 0


def _containers(value) -> int:
    if isinstance(value, dict):
        return 1 + sum(map(_containers, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(_containers, value))
    return 0


def _longest(value) -> int:
    if isinstance(value, dict):
        return max(map(_longest, value.values()), default=0)
    if isinstance(value, list):
        return max(map(_longest, value), default=0)
    if isinstance(value, int):
        return len(str(abs(value)))
    return 0


def _random_json(rng, level: int = 0):
    r = rng.random()
    if r < 0.1:
        return int(rng.integers(0, 10**int(rng.integers(1, 18))))
    if level > 6 or r < 0.3:
        return "".join(rng.choice(ALPHABET, rng.integers(0, 6)))
    if r < 0.6:
        return [_random_json(rng, level + 1) for _ in range(rng.integers(0, 4))]
    return {f"{i}{''.join(rng.choice(ALPHABET, 2))}": _random_json(rng, level + 1)
            for i in range(rng.integers(0, 4))}


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_depth_matches_the_parsed_json(ensure_ascii):
    rng = np.random.default_rng(0)
    for _ in range(2000):
        value = _random_json(rng)
        text = json.dumps(value, ensure_ascii=ensure_ascii).encode()
        shape = scan_json(text)
        assert shape.depth == _reference(value), text
        assert shape.containers == _containers(value), text
        assert shape.longest_number == _longest(value), text


def test_the_scan_carries_its_state_across_chunks(monkeypatch):
    monkeypatch.setattr(json_scan, "_CHUNK", 7)
    test_depth_matches_the_parsed_json(True)


@pytest.mark.parametrize("text, depth", [
    (b"", 0), (b"7", 0), (b"[]", 1), (b"[[[[]]]]", 4), (b'{"a": "[[[{"}', 1),
    (b'["\\\\", [1]]', 2), (b'["\\"[", [1]]', 2), (b'["\\\\\\"{{", {}]', 2),
])
def test_known_depths(text, depth):
    assert scan_json(text).depth == depth


@pytest.mark.parametrize("text, message", [
    (b"[" * 65 + b"]" * 65, "nests deeper than 64"),
    (b"[" + b",".join([b"[[[[]]]]"] * 5000) + b"]", "arrays and objects"),
    (b"[1" + b"0" * 5000 + b"]", "number of 5001 digits"),  # CPython's 4,300-digit ValueError
    (b'{"a": 1', "not valid JSON"),
    (b"[\"\xff\"]", "not valid JSON"),  # not UTF-8
])
def test_load_json_refuses_with_the_error_it_is_given(text, message):
    with pytest.raises(ArtifactError, match=message) as caught:
        load_json(text, ArtifactError, "header", JsonLimits())
    assert caught.value.__context__ is None and "\n" not in str(caught.value)


_ODD_TEXTS = ["", " ", "  [1, 2] ", "\n{}\t", "[1] [2]", "[1,]", "{'a': 1}", "NaN", "-Infinity",
              "[1e400, -0.0, 1.5e-7]", '"\\ud83d\\ude00"', '"\\ud800"', "\ufeff[]", "nul",
              "[true, false, null]", '{"a": 1, "a": 2}', "01", "[1 2]", '"a\tb"', "[" * 10]


@pytest.mark.parametrize("hook", [None, list])
@pytest.mark.parametrize("c_scanner", [True, False])
def test_the_parse_is_json_loads(hook, c_scanner, monkeypatch):
    """Values, and which texts are refused, as `json.loads` with the same hook (through
    CPython's C scanner, or `json` itself where there is none)."""
    if not c_scanner:
        monkeypatch.setitem(sys.modules, "_json", None)  # import fails
    rng = np.random.default_rng(1)
    texts = [json.dumps(_random_json(rng), ensure_ascii=bool(i % 2)) for i in range(500)]
    for text in texts + _ODD_TEXTS:
        try:
            expected = json.loads(text, object_pairs_hook=hook)
        except ValueError:
            with pytest.raises(ValueError):
                json_scan._loads(text, hook)
            continue
        got = json_scan._loads(text, hook)
        assert repr(got) == repr(expected), text  # repr: nan == nan, -0.0 vs 0.0


_LAZY = (("graph", "nodes"), ("weights",))  # the arrays a reader of .rlx headers iterates


def _materialised(value):
    """`value` with the lazy arrays at `_LAZY` (if any) made lists."""
    if isinstance(value, dict) and isinstance(value.get("graph"), dict) \
            and isinstance(value["graph"].get("nodes"), Iterator):
        value["graph"]["nodes"] = list(value["graph"]["nodes"])
    if isinstance(value, dict) and isinstance(value.get("weights"), Iterator):
        value["weights"] = list(value["weights"])
    return value


def _headers(rng, count: int) -> list[str]:
    """Texts shaped as headers around random JSON: the node list an array (or not), keys
    repeated, written compact or indented."""
    texts = []
    for i in range(count):
        nodes = [_random_json(rng) for _ in range(rng.integers(0, 5))] if i % 5 else \
            _random_json(rng)
        graph = {"name": "g", "nodes": nodes, "outputs": [1]}
        if i % 7 == 0:
            graph = {"nodes": [], **graph}  # an earlier "nodes" key
        body = {"format": "rlx", "meta": _random_json(rng), "graph": graph,
                "weights": _random_json(rng)}
        texts.append(json.dumps(body, indent=2 if i % 3 == 0 else None,
                                separators=(",", ":") if i % 3 == 1 else None))
    return texts


def _mutated(rng, texts: list[str], count: int) -> list[str]:
    """Texts with one structural byte dropped, doubled or swapped: mostly not JSON."""
    out = []
    for _ in range(count):
        text = texts[rng.integers(len(texts))]
        k = int(rng.integers(len(text)))
        out.append([text[:k] + text[k + 1:], text[:k] + text[k] + text[k:],
                    text[:k] + str(rng.choice(list(',:[]{}" '))) + text[k + 1:]][k % 3])
    return out


def test_a_lazy_array_parses_as_json_loads():
    """The node list and the weight table as iterators: every text that `json.loads`
    refuses is refused before any element is handed out, and every other parses to the
    same value."""
    rng = np.random.default_rng(2)
    texts = _headers(rng, 300)
    lazy = lazy_weights = 0
    for text in texts + _mutated(rng, texts, 1500) + _ODD_TEXTS:
        try:
            expected = json.loads(text)
        except ValueError:
            with pytest.raises(ValueError):
                json_scan._loads(text, None, _LAZY)
            continue
        got = json_scan._loads(text, None, _LAZY)
        lazy += isinstance(got, dict) and isinstance(got.get("graph"), dict) and \
            isinstance(got["graph"].get("nodes"), Iterator)
        lazy_weights += isinstance(got, dict) and isinstance(got.get("weights"), Iterator)
        assert repr(_materialised(got)) == repr(expected), text
    assert lazy >= 200  # the texts whose node list is an array got an iterator
    assert lazy_weights >= 50  # and those whose weight table is one


def test_load_json_leaves_the_array_whole_where_a_surrogate_escape_is_checked():
    text = json.dumps({"graph": {"nodes": ["\ud83d\ude00", 1]}}).encode()
    body = load_json(text, ArtifactError, "header", lazy=_LAZY)
    assert body == {"graph": {"nodes": ["\U0001f600", 1]}}
    with pytest.raises(ArtifactError, match="lone surrogate"):
        load_json(b'{"graph": {"nodes": ["\\ud800"]}}', ArtifactError, "header", lazy=_LAZY)


_SCAN_GROWTH = """
from rlx.engines.mapping import anon_rss_bytes
from rlx.safeio.json_scan import scan_json
raw = b"[" + b",".join(b'{"x": [1, 2, 3], "name": "node%d"}' % i for i in range(30000)) + b"]"
before = anon_rss_bytes()
scan_json(raw)
print(len(raw), anon_rss_bytes() - before)
"""


def test_the_scan_leaves_no_heap_behind():
    """The scan's temporaries are one chunk's, reused chunk after chunk: scanning 1 MiB of
    JSON (a header's size) leaves < 256 KiB of anonymous memory (64 KiB chunks left 1.1
    MiB resident after the scan, in every process that read such a header)."""
    out = subprocess.run([sys.executable, "-c", _SCAN_GROWTH], capture_output=True, text=True,
                         check=True).stdout.split()
    size, growth = int(out[0]), int(out[1])
    assert size > 1 << 20
    assert growth < 256 << 10, growth


def test_the_scan_peaks_at_a_few_chunks_of_temporaries():
    """What the scan allocates at its peak (numpy's buffers, counted by tracemalloc): a
    process that keeps freed memory (`rlx.runtime.heap`) keeps that peak resident after
    every header it reads. 1 MiB of JSON peaks under 192 KiB (8 KiB chunks, one int32
    buffer for the sums, masks combined in place: 170 KiB; 16 KiB chunks with a new array
    per step: 500 KiB)."""
    import tracemalloc

    raw = b"[" + b",".join(b'{"x": [1, 2, 3], "name": "node%d"}' % i for i in range(30000)) + b"]"
    assert len(raw) > 1 << 20 and b"\\" not in raw  # no escapes: the text is not copied
    tracemalloc.start()
    try:
        scan_json(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 192 << 10, peak
