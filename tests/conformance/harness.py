"""The ONNX backend node-test conformance harness.

Each case of `onnx.backend.test.case.node.collect_testcases` (a one-node model, or its
`_expanded` function body, with data sets of inputs and expected outputs) goes through the
whole user path: `import_onnx` -> `bake` (exact profile) -> `write_rlx` -> `read_rlx` ->
`Session.compile` -> `run`, and is compared with the expected outputs (count, shape, dtype,
values within the case's rtol/atol). A failing case never stops the others: `run_case`
returns the reason as one line.

Cases are grouped as the conformance report counts them: all cases; the float32 group
(default domain, at least one float32 tensor and otherwise only plain integer/bool tensors,
not an `_expanded` or `test_training_dropout*` case); and the float32 common ops (the float32
group restricted to `COMMON_OPS`).
"""

from __future__ import annotations

import functools
import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import ModelProto, TensorProto, numpy_helper

from rlx import BakeOptions, bake
from rlx.artifact import read_rlx, write_rlx
from rlx.frontends import import_onnx
from rlx.runtime import Session

COMMON_OPS = frozenset("""
    MatMul Gemm Conv ConvTranspose Add Mul Sub Div Relu Sigmoid Tanh Gelu Erf Softmax
    LogSoftmax LayerNormalization Reshape Transpose Concat Slice Gather Unsqueeze Squeeze
    ReduceMean ReduceSum ReduceMax Pow Sqrt Where Cast Expand Shape MaxPool AveragePool
    GlobalAveragePool BatchNormalization Flatten Clip HardSigmoid HardSwish LeakyRelu Exp Neg
    Identity Split Pad Resize ConstantOfShape Equal Range Constant Dropout Einsum Max Min Abs
    Reciprocal Log Not Less Greater Sum Mean InstanceNormalization PRelu Elu Selu Softplus
    Tile TopK ArgMax CumSum
""".split())  # noqa: SIM905  (a word list reads better than 70 quoted strings)

GROUPS = ("float32_common", "float32", "all")

_PLAIN_INTEGERS = {
    TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
    TensorProto.BOOL,
}
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@dataclass(frozen=True)
class Case:
    name: str
    op: str
    model: ModelProto
    data_sets: tuple
    rtol: float
    atol: float
    groups: frozenset[str]


@functools.lru_cache(maxsize=1)
def load_cases() -> tuple[Case, ...]:
    """Every node case of the installed onnx package, with its op and groups."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own numpy overflow warnings
        raw = [c for c in collect_testcases(None) if c.kind == "node"]
    ops = {c.name: c.model.graph.node[0].op_type for c in raw if len(c.model.graph.node) == 1}
    cases = []
    for c in raw:
        op = ops.get(c.name) or ops.get(_EXPANDED.sub("", c.name), "(expanded)")
        groups = {"all"}
        if _is_float32(c.name, c.model):
            groups.add("float32")
            if op in COMMON_OPS:
                groups.add("float32_common")
        cases.append(Case(c.name, op, c.model, tuple(c.data_sets), c.rtol, c.atol,
                          frozenset(groups)))
    return tuple(sorted(cases, key=lambda c: c.name))


def _is_float32(name: str, model: ModelProto) -> bool:
    graph = model.graph
    if _EXPANDED.search(name) or name.startswith("test_training_dropout"):
        return False
    if any(node.domain not in ("", "ai.onnx") for node in graph.node):
        return False
    types = []
    for value in (*graph.input, *graph.output):
        if value.type.WhichOneof("value") != "tensor_type":
            return False
        types.append(value.type.tensor_type.elem_type)
    return TensorProto.FLOAT in types and all(
        t == TensorProto.FLOAT or t in _PLAIN_INTEGERS for t in types)


def run_case(case: Case, folder: Path | None = None, engine: str = "numpy") -> str | None:
    """None when the case passes, else why it failed (one line). `engine` other than numpy
    runs the baked file through `rlx.load(path, engine=engine)` instead of a Session."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return _run(case, folder, engine)
    except Exception as err:  # a failing case must not stop the harness
        text = " ".join(str(err).split())
        return f"{type(err).__name__}: {text[:300]}"


def _run(case: Case, folder: Path | None, engine: str = "numpy") -> str | None:
    graph, bindings = import_onnx(case.model)
    baked, _ = bake(graph, bindings, BakeOptions.from_profile("exact"))
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = Path(tmp) / f"{case.name}.rlx"
        write_rlx(path, baked)
        if engine == "numpy":
            loaded = read_rlx(path)
            compiled = Session().compile(loaded.into_runtime_graph())
        else:
            from rlx import load

            compiled = loaded = load(path, engine=engine)
        names = _input_names(case.model)
        for k, (inputs, expected) in enumerate(case.data_sets):
            feeds = dict(zip(names, map(_array, inputs)))
            got = compiled.run(feeds)
            problem = _compare(got, [_array(e) for e in expected], case.rtol, case.atol)
            if problem:
                return f"data set {k}: {problem}"
        del compiled, loaded  # release the memory map before the folder goes
    return None


def _array(value) -> np.ndarray:
    """A data-set entry as numpy (some cases store TensorProtos, e.g. for bfloat16)."""
    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


def _input_names(model: ModelProto) -> list[str]:
    initialized = {t.name for t in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name not in initialized]


def _compare(got: list, expected: list, rtol: float, atol: float) -> str | None:
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.dtype != e.dtype:
            return f"output {i}: dtype {g.dtype}, expected {e.dtype}"
        if g.shape != e.shape:
            return f"output {i}: shape {list(g.shape)}, expected {list(e.shape)}"
        try:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
        except AssertionError as err:
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            detail = next((ln for ln in lines if ln.startswith("Max absolute")), lines[0])
            return f"output {i}: values differ ({detail})"
    return None


def rates(failed: set[str], cases=None) -> dict[str, tuple[int, int]]:
    """(passed, total) per group, given the names of the failing cases."""
    cases = load_cases() if cases is None else cases
    out = {}
    for group in GROUPS:
        members = [c for c in cases if group in c.groups]
        out[group] = (sum(c.name not in failed for c in members), len(members))
    return out
