"""The bake's bundled self-test (`BakeOptions.self_test`, docs/format.md "Self-test").

The samples are the feeds given (the calibration feeds by default) or one seeded sample of
the declared shapes (`rlx.runtime.feeds.seeded_feeds`). Their reference outputs are the
**exact** graph's (the one the accuracy guard compares against: everything but the lossy
encodings applied) on the numpy runtime, so a file checks that it still computes the model
it was baked from, not only what it computed at bake time. Each output's tolerance is the
sum of two measured parts:

- `deviation`: how far the baked graph itself is from the exact one on these samples (0
  for lossless profiles; the lossy encodings' error for the size profile, at least what
  the guard measured on its calibration feeds), counted twice for a fast file's int8
  plan: another engine's int8 kernels round ties and requantise in their own order, so its
  error is of the plan's size but not the same error (onnxruntime's was 1.3x numpy's on
  orientation-lcnet);
- `allowance`: `ENGINE_ALLOWANCE` x the output's largest |reference|, for engines that sum
  in another order (float outputs only: integer and boolean outputs must match).

The samples are kept in order while they fit the cap: max(1 MiB, 1% of the weights). A
first sample over it is sliced: its symbolic dims halved until it fits (nudenet's 320x320
image becomes 160x160); the note says what was kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from rlx.artifact.self_test import OutputTolerance, SelfTest
from rlx.baking.guard import AccuracyReport
from rlx.errors import BakeError, RlxError
from rlx.ir.graph import Graph
from rlx.runtime.feeds import check_feeds, seeded_feeds
from rlx.runtime.session import Session

__all__ = ["CAP_BYTES", "CAP_SHARE", "ENGINE_ALLOWANCE", "SEED", "build_self_test"]

CAP_BYTES = 1 << 20
CAP_SHARE = 0.01
ENGINE_ALLOWANCE = 1e-4
"""Of an output's largest |reference|. The largest gap measured between an engine and the
numpy runtime on the MODELS.md models (exact and size profiles, onnxruntime and OpenVINO)
was 6.7e-6 of it (silero-vad on onnxruntime; the others <= 1.4e-6): a 15x margin
(tests/engines/test_self_test.py runs every engine on every model)."""
SEED = 0

Feeds = Mapping[str, np.ndarray]


def _seeded(exact: Graph, reference) -> tuple[dict[str, np.ndarray], str]:
    """One seeded sample (`rlx.runtime.feeds.seeded_feeds`) and a note saying so; a one-line
    error when the model cannot run on it (an input that selects a branch, a rate)."""
    feeds, sized = seeded_feeds(exact.inputs(), np.random.default_rng(SEED))
    named = ", ".join(f"{k}={v}" for k, v in sorted(sized.items()))
    try:
        reference.run(feeds)
    except RlxError as err:
        raise BakeError(f"self-test: the model does not run on a seeded sample"
                        f"{' (' + named + ')' if named else ''}: give samples of real inputs "
                        f"(--self-test FEEDS.npz); {err}") from None
    return feeds, f"1 seeded sample (seed {SEED}{'; ' + named if named else ''})"


def build_self_test(exact: Graph, baked: Graph, feeds: Sequence[Feeds] | None,
                    weight_bytes: int, accuracy: AccuracyReport, int8_plan: bool = False
                    ) -> SelfTest:
    """The self-test of a bake: `exact` and `baked` graphs (runnable, weights bound),
    `feeds` (None: one seeded sample), the file's weight bytes (for the cap), the guard's
    report (its measured error is the least deviation a lossy output is allowed), whether
    `baked` runs an int8 precision plan (its deviation counts twice)."""
    reference = Session().compile(exact)
    if feeds:
        samples, origin = [dict(f) for f in feeds], f"{len(feeds)} feed set(s) given"
    else:
        seeded, origin = _seeded(exact, reference)
        samples = [seeded]
    cap = max(CAP_BYTES, int(CAP_SHARE * weight_bytes))
    kept_inputs: list[dict[str, np.ndarray]] = []
    refs: list[list[np.ndarray]] = []
    used, sliced = 0, ""
    for sample in samples:
        conformed = check_feeds(exact.inputs(), sample)
        inputs = {n.source_name: conformed[n.id] for n in exact.inputs()}
        outputs = reference.run(inputs)
        if not kept_inputs and _stored_bytes(inputs, outputs) > cap:
            inputs, outputs, sliced = _fit(exact, reference, inputs, outputs, cap)
        size = _stored_bytes(inputs, outputs)
        if used + size > cap:
            break
        kept_inputs.append(inputs)
        refs.append(outputs)
        used += size
    ours = Session().compile(baked)
    outs = [ours.run(inputs) for inputs in kept_inputs]
    guarded = {a.name: a.max_abs for a in accuracy.final}
    tolerances = [_tolerance(name, [r[j] for r in refs], [o[j] for o in outs],
                             guarded.get(name, 0.0), 2.0 if int8_plan else 1.0)
                  for j, name in enumerate(reference.output_names)]
    note = f"{len(kept_inputs)} of {origin}{sliced} (cap {cap:,} bytes)"
    return SelfTest(kept_inputs, refs, tolerances, note)


def _stored_bytes(inputs: Mapping[str, np.ndarray], outputs: list[np.ndarray]) -> int:
    """Bytes a sample takes in the blob, alignment padding included."""
    return sum(-(-a.nbytes // 64) * 64 for a in [*inputs.values(), *outputs])


def _fit(exact: Graph, reference, inputs: dict[str, np.ndarray], outputs: list[np.ndarray],
         cap: int) -> tuple[dict[str, np.ndarray], list[np.ndarray], str]:
    """A sample over the cap, sliced: every symbolic dim halved (the same slice of each
    input that has it) until it fits; (inputs, their exact outputs, a note of the sizes)."""
    size = _stored_bytes(inputs, outputs)
    while size > cap:
        halved = _halve(exact, inputs)
        if halved is None:
            raise BakeError(f"self-test: one sample takes {size:,} bytes, over the cap of "
                            f"{cap:,} (max of 1 MiB and 1% of the weights), and no symbolic "
                            "dim is left to slice; give smaller feeds with --self-test FEEDS.npz")
        inputs, sizes = halved
        try:
            outputs = reference.run(inputs)
        except Exception as err:  # noqa: BLE001 - the model's own limits, said in one line
            raise BakeError(f"self-test: one sample is over the cap of {cap:,} bytes and the "
                            f"model does not run on a slice ({', '.join(sizes)}): "
                            f"{str(err)[:200]}") from None
        size = _stored_bytes(inputs, outputs)
    return inputs, outputs, f", sliced to {', '.join(sizes)}"


def _halve(exact: Graph, inputs: dict[str, np.ndarray]
           ) -> tuple[dict[str, np.ndarray], list[str]] | None:
    """Each input with every symbolic dim of size > 1 halved, and the new sizes by name;
    None when there is none."""
    sizes: dict[str, int] = {}
    for node in exact.inputs():
        for axis, dim in enumerate(node.tensor_shape.dims):
            if not isinstance(dim, int):
                sizes[str(dim)] = inputs[node.source_name].shape[axis]
    if all(n <= 1 for n in sizes.values()):
        return None
    half = {name: max(1, n // 2) for name, n in sizes.items()}
    sliced = {}
    for node in exact.inputs():
        index = tuple(slice(0, half[str(d)]) if not isinstance(d, int) else slice(None)
                      for d in node.tensor_shape.dims)
        sliced[node.source_name] = np.ascontiguousarray(inputs[node.source_name][index])
    return sliced, [f"{name}={n}" for name, n in sorted(half.items())]


def _tolerance(name: str, refs: list[np.ndarray], outs: list[np.ndarray],
               guarded: float, weight: float) -> OutputTolerance:
    deviation = weight * max([guarded] + [_max_abs(o, r)
                                          for o, r in zip(outs, refs, strict=True)])
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
