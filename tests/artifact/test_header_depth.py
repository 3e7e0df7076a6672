"""The reader's nesting check runs on the header bytes before parsing; it must agree with
the depth of the parsed JSON on any text json.dumps writes, whatever its strings hold
(brackets, quotes, backslashes, non-ASCII)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlx.artifact.reader import _depth

ALPHABET = ['[', ']', '{', '}', '"', '\\', 'a', ' ', '\n', 'é']


def _reference(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_reference, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_reference, value), default=0)
    return 0


def _random_json(rng, level: int = 0):
    r = rng.random()
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
        assert _depth(text) == _reference(value), text


@pytest.mark.parametrize("text, depth", [
    (b"", 0), (b"7", 0), (b"[]", 1), (b"[[[[]]]]", 4), (b'{"a": "[[[{"}', 1),
    (b'["\\\\", [1]]', 2), (b'["\\"[", [1]]', 2), (b'["\\\\\\"{{", {}]', 2),
])
def test_known_depths(text, depth):
    assert _depth(text) == depth
