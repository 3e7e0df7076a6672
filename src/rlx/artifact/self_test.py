"""The bundled self-test of an `.rlx` file (docs/format.md, "Self-test"): reference inputs,
the exact graph's outputs on them and each output's tolerance, in one blob of the data
section that the header's `self_test` object describes.

Why a blob beside the weights: its bytes are covered by the header's checksum (its XXH3 is
in the blob table) and by a signature (which hashes every byte), like every other byte of
the file. Why it is lazy: a reader not asked for it never reads it. Its blob is viewed, not
touched, at open, and its checksum is checked when the test is decoded
(`SelfTestSection.load`), not with the weights', so a load that does not run it costs
nothing but the header's few lines of JSON.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import numpy as np

from rlx.artifact.layout import ALIGN, align, checksum
from rlx.errors import ArtifactError, IntegrityError
from rlx.ir.dtype import DType
from rlx.record import dataclass

__all__ = ["OutputTolerance", "SelfTest", "SelfTestSection", "encode_self_test"]

ROLES = ("input", "output")


@dataclass(frozen=True)
class OutputTolerance:
    """How far an engine's output may be from the stored reference: `atol`, the largest
    elementwise |output - reference| that passes; `deviation`, what the baked graph itself
    measured on the numpy runtime at bake time (0 for an exact bake; the lossy encodings'
    error for the size profile); `allowance`, what was added for engines' float order."""

    name: str
    atol: float
    deviation: float = 0.0
    allowance: float = 0.0


@dataclass
class SelfTest:
    """`inputs[i]` by input name and `outputs[i]` in `tolerances` order, for each sample i;
    `note` says where the samples came from and what was kept."""

    inputs: list[dict[str, np.ndarray]]
    outputs: list[list[np.ndarray]]
    tolerances: list[OutputTolerance]
    note: str = ""

    @property
    def samples(self) -> int:
        return len(self.inputs)

    @property
    def nbytes(self) -> int:
        """The blob's length: every array, each from a multiple of 64."""
        end = 0
        for _, _, _, array in self.arrays():
            end = align(end) + array.nbytes
        return end

    def arrays(self) -> Iterator[tuple[int, str, str, np.ndarray]]:
        """(sample, role, name, array) in blob order: each sample's inputs, then outputs."""
        names = [t.name for t in self.tolerances]
        for i, (feeds, outs) in enumerate(zip(self.inputs, self.outputs, strict=True)):
            for name, value in feeds.items():
                yield i, "input", name, value
            for name, value in zip(names, outs, strict=True):
                yield i, "output", name, value


def encode_self_test(test: SelfTest) -> tuple[dict[str, Any], np.ndarray]:
    """The header's `self_test` object (without its `blob`) and the blob's bytes."""
    payload = np.zeros(test.nbytes, np.uint8)
    tensors, end = [], 0
    for sample, role, name, array in test.arrays():
        offset = align(end)
        data = np.ascontiguousarray(array)
        payload[offset:offset + data.nbytes] = np.frombuffer(data.tobytes(), np.uint8)
        tensors.append({"sample": sample, "role": role, "name": name,
                        "dtype": DType.from_numpy(data.dtype).value,
                        "shape": list(data.shape), "offset": offset})
        end = offset + data.nbytes
    outputs = [{"name": t.name, "atol": t.atol, "deviation": t.deviation,
                "allowance": t.allowance} for t in test.tolerances]
    return {"samples": test.samples, "bytes": int(payload.nbytes), "note": test.note,
            "outputs": outputs, "tensors": tensors}, payload


class SelfTestSection:
    """A self-test as a reader found it: the header's description and a view of the blob,
    neither checked nor decoded until `load` (so an open that does not ask reads none of
    it); `samples` and `nbytes` are the description's claims, for `inspect`."""

    def __init__(self, description: dict[str, Any], view: memoryview, digest: str,
                 source: str):
        self.description = description
        self._view = view
        self._digest = digest
        self._source = source

    @property
    def nbytes(self) -> int:
        return len(self._view)

    @property
    def samples(self) -> int:
        value = self.description.get("samples")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def note(self) -> str:
        value = self.description.get("note")
        return value if isinstance(value, str) else ""

    def load(self) -> SelfTest:
        """The test, its blob's checksum checked first, every array a view of the blob."""
        if checksum(self._view) != self._digest:
            self._fail("checksum mismatch in the self-test blob: the file is corrupt",
                       IntegrityError)
        return _decode(self.description, self._view, self._fail)

    def _fail(self, message: str, error: type[ArtifactError] = ArtifactError) -> NoReturn:
        raise error(f"{self._source}: {message}")


Fail = Callable[..., NoReturn]


def _decode(body: dict[str, Any], view: memoryview, fail: Fail) -> SelfTest:
    samples = _count(body.get("samples"))
    if not samples or not isinstance(body.get("outputs"), list) \
            or not isinstance(body.get("tensors"), list):
        fail("self_test needs a sample count >= 1, outputs and tensors")
    tolerances = [_tolerance(row, fail) for row in body["outputs"]]
    names = [t.name for t in tolerances]
    inputs: list[dict[str, np.ndarray]] = [{} for _ in range(samples)]
    outputs: list[dict[str, np.ndarray]] = [{} for _ in range(samples)]
    end = 0
    for k, row in enumerate(body["tensors"]):
        sample, role, name, array, offset = _tensor(row, view, fail, f"self_test tensor {k}")
        if sample >= samples or offset < end or (role == "output" and name not in names):
            fail(f"self_test tensor {k}: sample, order or output name out of place")
        end = offset + array.nbytes
        (inputs if role == "input" else outputs)[sample][name] = array
    if any(set(s) != set(inputs[0]) for s in inputs) or any(len(o) != len(names)
                                                           for o in outputs):
        fail("self_test: every sample needs the same inputs and every output")
    note = body.get("note")
    return SelfTest(inputs, [[o[n] for n in names] for o in outputs], tolerances,
                    note if isinstance(note, str) else "")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _tolerance(row: Any, fail: Fail) -> OutputTolerance:
    numbers = [row.get(k) if isinstance(row, dict) else None
               for k in ("atol", "deviation", "allowance")]
    if not isinstance(row, dict) or not isinstance(row.get("name"), str) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and v >= 0 for v in numbers):
        fail("self_test outputs need a name and finite atol, deviation, allowance >= 0")
    return OutputTolerance(row["name"], *(float(v) for v in numbers if v is not None))


def _tensor(row: Any, view: memoryview, fail: Fail, where: str
            ) -> tuple[int, str, str, np.ndarray, int]:
    """(sample, role, name, array viewing the blob, offset) of one tensor row."""
    if not isinstance(row, dict) or row.get("role") not in ROLES \
            or not isinstance(row.get("name"), str) or not isinstance(row.get("shape"), list):
        fail(f"{where}: needs a role, a name and a shape")
    sample, offset = row.get("sample"), row.get("offset")
    if not isinstance(sample, int) or not isinstance(offset, int) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for v in (sample, offset, *row["shape"])) or offset % ALIGN:
        fail(f"{where}: sample, offset and dims must be integers >= 0, the offset aligned")
    try:
        dtype = DType(row.get("dtype")).numpy
    except ValueError:
        fail(f"{where}: unknown dtype {str(row.get('dtype'))[:20]!r}")
    count = math.prod(row["shape"])
    if offset + count * dtype.itemsize > len(view):
        fail(f"{where}: ends past the self-test blob ({len(view)} bytes)")
    array = np.frombuffer(view, dtype, count=count, offset=offset).reshape(row["shape"])
    return sample, row["role"], row["name"], array, offset
