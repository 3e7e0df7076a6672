"""The size profile on the MODELS.md models: one shared measurement for the slow test and
for `scripts/size_profile_table.py` (the README's table).

Per model: the exact file and the size file calibrated on one seeded input set
(`CALIBRATION_SEED`) with min cosine 0.9995, both serialised (in memory: their sizes are
the files' on disk); the size file then parsed and run by
the numpy runtime on held-out seeds and compared with onnxruntime on the ONNX model. The
share of float weights read by Conv/ConvTranspose/MatMul/Gemm/Gather is computed from the
ONNX file itself (initializers and Constant nodes, subgraphs included)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from rlx import BakeOptions, bake
from rlx.artifact import parse_rlx
from rlx.artifact.writer import iter_rlx_bytes
from rlx.onnx import import_onnx
from rlx.runtime import Session
from tests.real_models import FEEDS, fetch, import_kwargs

CALIBRATION_SEED = 100
HELD_OUT_SEEDS = (1, 2, 3)
MIN_COSINE = 0.9995
LINEAR_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Gather"}


@dataclass
class SizeResult:
    name: str
    exact_bytes: int
    size_bytes: int
    linear_share: float  # float weight bytes read by LINEAR_OPS / all float weight bytes
    kept: list[str]
    calibration_cosine: float  # worst output, vs the exact graph
    held_out_cosine: float  # worst output and seed, vs onnxruntime

    @property
    def ratio(self) -> float:
        return self.size_bytes / self.exact_bytes


def linear_share(model: onnx.ModelProto) -> float:
    """Share of float weight bytes whose readers are all Conv/MatMul/Gemm/Gather ops."""
    sizes: dict[str, int] = {}
    readers: dict[str, set[str]] = defaultdict(set)

    def walk(graph: onnx.GraphProto) -> None:
        for init in graph.initializer:
            if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
                sizes[init.name] = numpy_helper.to_array(init).nbytes
        for node in graph.node:
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.name == "value" and attr.t.data_type == onnx.TensorProto.FLOAT:
                        sizes[node.output[0]] = numpy_helper.to_array(attr.t).nbytes
            for name in node.input:
                readers[name].add(node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)

    walk(model.graph)
    total = sum(sizes.values())
    linear = sum(n for k, n in sizes.items() if readers[k] and readers[k] <= LINEAR_OPS)
    return linear / total if total else 0.0


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    return float(a @ b / (na * nb))


def _file_bytes(file) -> bytearray:
    """The bytes `write_rlx` writes for `file` (tests/artifact/test_streaming_write.py),
    made in memory: the size is the file's without writing it."""
    data = bytearray()
    for piece in iter_rlx_bytes(file):
        data += piece
    return data


def measure(name: str) -> SizeResult:
    path = fetch(name)
    graph, bindings = import_onnx(path, **import_kwargs(path))
    sizes = {}
    for profile in ("exact", "size"):
        opts = BakeOptions.from_profile(profile)
        if profile == "size":
            opts = opts.replace(calibration=[FEEDS[name](CALIBRATION_SEED)],
                                min_cosine=MIN_COSINE)
        file, report = bake(graph, bindings, opts)
        data = _file_bytes(file)
        sizes[profile] = len(data)
    compiled = Session().compile(parse_rlx(data, verify="full").into_runtime_graph())
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    held = min(_cosine(o, r) for seed in HELD_OUT_SEEDS
               for o, r in zip(compiled.run(FEEDS[name](seed)),
                               session.run(None, FEEDS[name](seed)), strict=True))
    acc = report.accuracy
    calibration = min(a.cosine for a in acc.final) if acc.final else 1.0
    return SizeResult(name, sizes["exact"], sizes["size"], linear_share(onnx.load(path)),
                      [t.name for t in acc.tensors if t.kept], calibration, held)
