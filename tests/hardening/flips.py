"""Integrity at scale: which bytes of an artifact a checksum covers, and what a flipped bit
does to each verify mode.

Every byte of a file is in exactly one region, computed from its own header:
- `header`: the preamble and the JSON header (both under the header checksum, or checked
  field by field: magic, schema, flags, length);
- `blob`: the bytes of a blob (under its XXH3-128);
- `padding`: zeros between the header and the data section and between blobs, which no
  reader looks at.
A flip in `header` must fail at open in every mode; in `blob` it must fail at open with
`verify="full"` and at first use with `"lazy"`, both as an IntegrityError; in `padding` it
must change nothing: the file opens and computes exactly what the intact one does.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

import numpy as np

from rlx import RlxFile
from rlx.artifact import parse_rlx
from rlx.artifact.layout import PREAMBLE, align
from rlx.errors import ArtifactError, IntegrityError
from rlx.ir import Graph
from rlx.runtime import Session
from tests.hardening import harness, mutate, seeds

HEADER, BLOB, PADDING = "header", "blob", "padding"


class Regions:
    """The region of every byte offset of one artifact."""

    def __init__(self, data: bytes):
        header, _ = mutate.split_rlx(data)
        header_end = PREAMBLE.size + PREAMBLE.unpack_from(data)[3]
        data_start = align(header_end)
        spans = [(0, header_end, HEADER), (header_end, data_start, PADDING)]
        cursor = data_start
        for blob in sorted(header["blobs"], key=lambda b: b["offset"]):
            start = data_start + blob["offset"]
            if start > cursor:
                spans.append((cursor, start, PADDING))
            spans.append((start, start + blob["length"], BLOB))
            cursor = start + blob["length"]
        assert cursor == len(data), "the file ends where its last blob ends"
        self.spans = [s for s in spans if s[1] > s[0]]
        self._starts = [s[0] for s in self.spans]

    def of(self, offset: int) -> str:
        return self.spans[bisect.bisect_right(self._starts, offset) - 1][2]

    def size(self, kind: str) -> int:
        return sum(end - start for start, end, k in self.spans if k == kind)


@dataclass
class FlipReport:
    """Counts of flips per region and verify mode; `wrong` lists what broke the rule."""

    flips: dict[str, int] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)

    def count(self, region: str) -> None:
        self.flips[region] = self.flips.get(region, 0) + 1


def _run(file: RlxFile) -> list[np.ndarray]:
    compiled = Session().compile(file.into_runtime_graph())
    return compiled.run(harness.feeds_for(compiled.input_shapes))


def _use(file: RlxFile) -> None:
    """Use every byte a file holds: its graph's (a compile) and its table's (a duplex
    file's other layout is checked only when it is used)."""
    file.into_runtime_graph()
    for row in file.weights:
        file.tensor(row.name)


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
               for x, y in zip(a, b)) and len(a) == len(b)


def check_flip(buffer: bytearray, bit: int, mode: str, region: str,
               expected: list[np.ndarray]) -> str | None:
    """Flip `bit` in place, apply the rule of its region, flip it back; None when kept."""
    buffer[bit // 8] ^= 1 << (bit % 8)
    try:
        stage = "open"
        try:
            file = parse_rlx(buffer, verify=mode)
            stage = "use"
            if region == PADDING:
                return None if _same(_run(file), expected) else "padding flip changed results"
            _use(file)
        except ArtifactError as err:
            if region == HEADER and stage == "open":
                return None
            want = "open" if mode == "full" else "use"
            if region == BLOB and isinstance(err, IntegrityError) and stage == want:
                return None
            return f"{region} flip: {type(err).__name__} at {stage} ({err})"
        return f"{region} flip went unnoticed"
    finally:
        buffer[bit // 8] ^= 1 << (bit % 8)


def flip_bits(data: bytes, bits, modes=("full", "lazy")) -> FlipReport:
    """Check each bit in `bits` under each mode."""
    regions = Regions(data)
    expected = _run(parse_rlx(data, verify="full"))
    buffer = bytearray(data)
    report = FlipReport()
    for bit in bits:
        region = regions.of(bit // 8)
        for mode in modes:
            report.count(f"{region}/{mode}")
            problem = check_flip(buffer, bit, mode, region, expected)
            if problem:
                report.wrong.append(f"bit {bit} ({mode}): {problem}")
    return report


def random_bits(data: bytes, count: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(len(data) * 8) for _ in range(count)]


def large_artifact(megabytes: int, seed: int = 0) -> bytes:
    """About 32 constants of odd sizes (so there is padding between them), `megabytes` in
    all, which are the graph's outputs: few nodes, so the header parsed at every flip stays
    small and the flips cost what hashing the blobs costs."""
    rng = np.random.default_rng(seed)
    g = Graph("large")
    outputs, left = [], megabytes << 20
    while left > 0:
        n = max(1, int(min(left // 4, rng.integers(1, megabytes << 14))))
        left -= 4 * n
        outputs.append(g.constant(rng.standard_normal(n).astype(np.float32)))
    g.set_outputs(outputs)
    return seeds.artifact_bytes(RlxFile.from_baked(g, []))
