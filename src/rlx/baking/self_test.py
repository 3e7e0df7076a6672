"""The bake's bundled self-test (`BakeOptions.self_test`, docs/format.md "Self-test").

The samples are the feeds given (the calibration feeds by default) or one seeded sample of
the declared shapes. Their reference outputs are the **exact** graph's (the one the
accuracy guard compares against: everything but the lossy encodings applied) on the numpy
runtime, so a file checks that it still computes the model it was baked from, not only
what it computed at bake time. Each output's tolerance is the sum of two measured parts:

- `deviation`: how far the baked graph itself is from the exact one on these samples (0
  for lossless profiles; the lossy encodings' error for the size profile, at least what
  the guard measured on its calibration feeds);
- `allowance`: `ENGINE_ALLOWANCE` x the output's largest |reference|, for engines that sum
  in another order (float outputs only: integer and boolean outputs must match).

The samples are kept in order while they fit the cap: max(1 MiB, 1% of the weights).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from rlx.artifact.self_test import OutputTolerance, SelfTest
from rlx.baking.guard import AccuracyReport
from rlx.errors import BakeError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph
from rlx.runtime.feeds import check_feeds
from rlx.runtime.session import Session

__all__ = ["CAP_BYTES", "CAP_SHARE", "ENGINE_ALLOWANCE", "SEED", "build_self_test",
           "seeded_feeds"]

CAP_BYTES = 1 << 20
CAP_SHARE = 0.01
ENGINE_ALLOWANCE = 1e-4
"""Of an output's largest |reference|. The largest gap measured between engines on the
MODELS.md models (exact profile, onnxruntime and OpenVINO against the numpy runtime) was
below 1e-5 of that (tests/engines/test_self_test.py measures it per model); 10x margin."""
SEED = 0

Feeds = Mapping[str, np.ndarray]


def seeded_feeds(graph: Graph, seed: int = SEED) -> tuple[dict[str, np.ndarray], str]:
    """One sample of the declared inputs (symbolic dims at 1; floats standard normal,
    integers in 0..3, booleans fair coins) and a note saying so."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    sized: dict[str, int] = {}
    for node in graph.inputs():
        shape = node.tensor_shape
        dims = []
        for d in shape.dims:
            if not isinstance(d, int):
                sized[str(d)] = 1
            dims.append(d if isinstance(d, int) else 1)
        if shape.dtype is DType.BOOL:
            feeds[node.source_name] = rng.random(dims) < 0.5
        elif shape.dtype.is_float:
            feeds[node.source_name] = rng.standard_normal(dims).astype(shape.dtype.numpy)
        else:
            feeds[node.source_name] = rng.integers(0, 4, dims).astype(shape.dtype.numpy)
    named = ", ".join(f"{k}={v}" for k, v in sorted(sized.items()))
    return feeds, f"1 seeded sample (seed {seed}{'; ' + named if named else ''})"


def build_self_test(exact: Graph, baked: Graph, feeds: Sequence[Feeds] | None,
                    weight_bytes: int, accuracy: AccuracyReport) -> SelfTest:
    """The self-test of a bake: `exact` and `baked` graphs (runnable, weights bound),
    `feeds` (None: one seeded sample), the file's weight bytes (for the cap), the guard's
    report (its measured error is the least deviation a lossy output is allowed)."""
    if feeds:
        samples, origin = [dict(f) for f in feeds], f"{len(feeds)} feed set(s) given"
    else:
        seeded, origin = seeded_feeds(exact)
        samples = [seeded]
    cap = max(CAP_BYTES, int(CAP_SHARE * weight_bytes))
    reference = Session().compile(exact)
    kept_inputs: list[dict[str, np.ndarray]] = []
    refs: list[list[np.ndarray]] = []
    used = 0
    for sample in samples:
        conformed = check_feeds(exact.inputs(), sample)
        inputs = {n.source_name: conformed[n.id] for n in exact.inputs()}
        outputs = reference.run(inputs)
        size = sum(_stored(a) for a in [*inputs.values(), *outputs])
        if used + size > cap:
            break
        kept_inputs.append(inputs)
        refs.append(outputs)
        used += size
    if not kept_inputs:
        raise BakeError(f"self-test: one sample takes {size:,} bytes, over the cap of "
                        f"{cap:,} (max of 1 MiB and 1% of the weights); give smaller feeds "
                        "with --self-test FEEDS.npz")
    ours = Session().compile(baked)
    outs = [ours.run(inputs) for inputs in kept_inputs]
    guarded = {a.name: a.max_abs for a in accuracy.final}
    tolerances = [_tolerance(name, [r[j] for r in refs], [o[j] for o in outs],
                             guarded.get(name, 0.0))
                  for j, name in enumerate(reference.output_names)]
    note = f"{len(kept_inputs)} of {origin}, {used:,} bytes (cap {cap:,})"
    return SelfTest(kept_inputs, refs, tolerances, note)


def _stored(array: np.ndarray) -> int:
    """Bytes an array takes in the blob, its alignment padding included."""
    return -(-array.nbytes // 64) * 64


def _tolerance(name: str, refs: list[np.ndarray], outs: list[np.ndarray],
               guarded: float) -> OutputTolerance:
    deviation = max([guarded] + [_max_abs(o, r) for o, r in zip(outs, refs, strict=True)])
    if not np.isfinite(deviation):
        raise BakeError(f"self-test: output {name!r} of the baked graph is not finite where "
                        "the exact graph's is (or the reverse)")
    floats = refs[0].dtype.kind in "fc"
    scale = max((float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0)) for r in refs),
                default=0.0) if floats else 0.0
    allowance = ENGINE_ALLOWANCE * scale if floats else 0.0
    return OutputTolerance(name, deviation + allowance, deviation, allowance)


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| over the elements, NaN matching NaN (and inf the same inf)."""
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if x.shape != y.shape:
        raise BakeError(f"self-test: the baked graph's output has shape {x.shape}, the exact "
                        f"graph's {y.shape}")
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    gaps = np.where(same, 0.0, np.abs(x - y))
    return float(np.max(gaps, initial=0.0)) if np.all(np.isfinite(gaps)) else float("inf")
