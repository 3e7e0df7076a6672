"""Synthetic models larger than a bake may hold, and a worker that bakes or runs one in a fresh
process and prints what that process measured.

The model is a chain of `layers` MatMuls by `dim x dim` float32 weights, stored one tensor at
a time (never the whole model in memory) as a safetensors file, as an ONNX model with
external data, or as GGUF Q8_0 tensors. Layer i's weight is a random base matrix with its
rows rolled by `shift(i)`: `h @ roll(B, s, axis=0) == roll(h, -s) @ B`, so the float64
reference needs only `B`, however many layers there are. B's entries have variance 1/dim,
so the activations keep their size along the chain and an error made in one layer neither
grows nor fades: Q8_0's ~0.5% a layer adds up to ~0.5% x sqrt(layers). An embedding model
(`table`) is one `rows x dim` float32 table a Gather reads, as a safetensors file.

`python -m tests.baking.big_model bake KIND SOURCE OUT PROFILE LAYERS DIM` loads the model
(a `table`'s LAYERS are its rows), bakes and writes it, and prints JSON: `peak_rss` (the
process's VmHWM: file-backed pages of mapped weights count), `growth` (the peak of the bake
over the RSS before it: the peak is reset between, `/proc/self/clear_refs`), `cpu`.
`run OUT LAYERS DIM` runs the baked file on the numpy engine and prints its output.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

SEED = 7


def base(dim: int) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    return rng.standard_normal((dim, dim), dtype=np.float32) * np.float32(dim ** -0.5)


def shift(i: int, dim: int) -> int:
    return (i * 977) % dim


def weights(layers: int, dim: int):
    """Layer by layer: (name, the [K, N] weight)."""
    b = base(dim)
    for i in range(layers):
        yield f"w{i}", np.roll(b, shift(i, dim), axis=0)


def rolled_rows(b: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """`np.roll(b, s, axis=0)` as its two row ranges, views of `b` (no copy of the weight)."""
    cut = len(b) - s
    return b[cut:], b[:cut]


def write_safetensors(path: Path, layers: int, dim: int) -> int:
    """The safetensors file (header, then each weight made and written in turn); its size."""
    nbytes = dim * dim * 4
    header = {f"w{i}": {"dtype": "F32", "shape": [dim, dim],
                        "data_offsets": [i * nbytes, (i + 1) * nbytes]} for i in range(layers)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    b = base(dim)
    with open(path, "wb") as out:
        out.write(len(text).to_bytes(8, "little"))
        out.write(text)
        for i in range(layers):
            for rows in rolled_rows(b, shift(i, dim)):
                out.write(rows.data)
    return 8 + len(text) + layers * nbytes


TABLE_BLOCK = 4096
"""Rows of the embedding table made (and written) at a time."""


def table(rows: int, dim: int):
    """The embedding table, `TABLE_BLOCK` rows at a time."""
    rng = np.random.default_rng(SEED)
    for _ in range(0, rows, TABLE_BLOCK):
        yield rng.standard_normal((TABLE_BLOCK, dim), dtype=np.float32)


def write_table(path: Path, rows: int, dim: int) -> None:
    """The embedding table (`rows` a multiple of `TABLE_BLOCK`) as a safetensors file."""
    nbytes = rows * dim * 4
    text = json.dumps({"table": {"dtype": "F32", "shape": [rows, dim],
                                 "data_offsets": [0, nbytes]}}).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(len(text).to_bytes(8, "little"))
        out.write(text)
        for block in table(rows, dim):
            out.write(block.data)


def table_ids(rows: int) -> np.ndarray:
    """The ids the embedding model is run on: the first, the last and some rows between."""
    return np.array([[0, rows - 1, *np.random.default_rng(SEED).integers(0, rows, 14)]])


def table_graph(rows: int, dim: int):
    from rlx.ir import Graph, Shape
    from rlx.ir.dtype import DType
    from rlx.ir.ops.shaping import Gather

    g = Graph("embedding")
    ids = g.input("ids", Shape([1, 16], DType.from_numpy(np.dtype(np.int64))))
    looked_up = g.add_node(Gather(axis=0), (g.param("table", Shape([rows, dim])), ids),
                           Shape([1, 16, dim]))
    g.set_outputs([looked_up])
    return g


def write_onnx(folder: Path, layers: int, dim: int) -> Path:
    """`model.onnx` whose initializers keep their bytes in `weights.bin` next to it."""
    import onnx
    from onnx import TensorProto, helper

    initializers, nodes = [], []
    with open(folder / "weights.bin", "wb") as out:
        for i, (name, w) in enumerate(weights(layers, dim)):
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[dim, dim],
                                 data_location=TensorProto.EXTERNAL)
            for key, value in (("location", "weights.bin"), ("offset", out.tell()),
                               ("length", w.nbytes)):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            out.write(w.data)
            initializers.append(tensor)
            nodes.append(helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", name],
                                          [f"h{i + 1}"]))
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, dim])], [helper.make_tensor_value_info(
            f"h{layers}", TensorProto.FLOAT, [1, dim])], initializers)
    path = folder / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def write_gguf(path: Path, layers: int, dim: int) -> None:
    """Each weight as GGUF stores a linear layer: Q8_0 rows of K, shape [N, K] (= W^T)."""
    import gguf
    from gguf.quants import quantize

    writer = gguf.GGUFWriter(str(path), "big")
    for name, w in weights(layers, dim):
        writer.add_tensor(name, quantize(np.ascontiguousarray(w.T), gguf.GGMLQuantizationType
                                         .Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def graph(layers: int, dim: int):
    from rlx.ir import Graph, Shape

    g = Graph("big")
    h = g.input("x", Shape([1, dim]))
    for i in range(layers):
        h = g.matmul(h, g.param(f"w{i}", Shape([dim, dim])))
    g.set_outputs([h])
    return g


def feeds(dim: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(SEED + 1).uniform(-1, 1, (1, dim)).astype(np.float32)}


def reference(layers: int, dim: int) -> np.ndarray:
    """The chain's output in float64, `B` widened 1,024 rows at a time (a float64 copy of
    a whole 8192 x 8192 `B` would be 512 MiB more in the test's process)."""
    b = base(dim)
    h = feeds(dim)["x"].astype(np.float64)
    for i in range(layers):
        h = np.roll(h, -shift(i, dim), axis=1)
        h = sum(h[:, r:r + 1024] @ b[r:r + 1024].astype(np.float64) for r in range(0, dim, 1024))
    return h


def _load(kind: str, source: str, layers: int, dim: int):
    """The graph and its weights; a weights file may hold more layers than the graph has
    (tests share one file): the bake is given those of its own layers only."""
    import dataclasses

    import rlx
    from rlx.weights import WeightBundle

    if kind == "onnx":
        from rlx.onnx import import_onnx

        g, bindings = import_onnx(source)
        return g, WeightBundle(dict(bindings))
    if kind == "table":
        return table_graph(layers, dim), rlx.load_weights(source)
    bundle = rlx.load_weights(source)
    own = {name: bundle.tensors[name] for name in (f"w{i}" for i in range(layers))}
    return graph(layers, dim), dataclasses.replace(bundle, tensors=own)


def _peak() -> int:
    """The process's peak RSS since the last reset (VmHWM): ru_maxrss would also count the
    parent's RSS at the fork this process was exec'd from (Linux keeps it across exec)."""
    return _status("VmHWM")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/self/status")


def _bake(kind: str, source: str, out: str, profile: str, layers: int, dim: int) -> dict:
    import rlx

    g, bundle = _load(kind, source, layers, dim)
    loading = _peak()
    _reset_peak()  # the peak from here on is the bake's
    start = _status("VmRSS")
    file, report = rlx.bake_bundle(g, bundle, rlx.BakeOptions.from_profile(profile))
    rlx.write_rlx(out, file)
    return {"weight_bytes": report.weight_bytes, "encoded": report.optimize.encoded,
            "growth": _status("VmHWM") - start, "peak_rss": max(loading, _peak())}


def _run(path: str, layers: int, dim: int) -> dict:
    import rlx

    model = rlx.load(path, engine="numpy")
    names = [spec.name for spec in model.inputs]
    inputs = feeds(dim) if "x" in names else {"ids": table_ids(layers)}
    (y,) = model.run(inputs)
    return {"y": np.asarray(y, np.float64).reshape(-1).tolist()}


def main(argv: list[str]) -> None:
    command, *args = argv
    _reset_peak()
    layers, dim = int(args[-2]), int(args[-1])
    start = time.process_time()
    result = _bake(*args[:4], layers, dim) if command == "bake" else _run(args[0], layers, dim)
    result.setdefault("peak_rss", _peak())
    print(json.dumps({**result, "cpu": time.process_time() - start}))


if __name__ == "__main__":
    main(sys.argv[1:])
