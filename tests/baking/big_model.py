"""A synthetic model larger than a bake may hold: `layers` MatMul + Tanh layers of `dim x dim`
float32 weights in one safetensors file, written one tensor at a time, and a float64 forward
of it that never reads the file.

Layer i's weight is a random base matrix with its rows rolled by `shift(i)`:
`h @ roll(B, s, axis=0) == roll(h, -s) @ B`, so the reference needs only `B` (in float64),
however many layers there are. Run as `python -m tests.baking.big_model bake|run ...` in a
fresh process, it prints what that process measured (its own peak RSS, CPU time) as JSON.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

SEED = 7
GAIN = 1.5  # pre-activations of about unit variance: tanh neither saturates nor vanishes


def base(dim: int) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    return (rng.standard_normal((dim, dim), dtype=np.float32) * np.float32(GAIN / dim ** 0.5))


def shift(i: int, dim: int) -> int:
    return (i * 977) % dim


def write_model(path: Path, layers: int, dim: int) -> int:
    """The safetensors file (header, then each weight made and written in turn); its size."""
    b = base(dim)
    nbytes = dim * dim * 4
    header = {f"w{i}": {"dtype": "F32", "shape": [dim, dim],
                        "data_offsets": [i * nbytes, (i + 1) * nbytes]} for i in range(layers)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(len(text).to_bytes(8, "little"))
        out.write(text)
        for i in range(layers):
            out.write(np.roll(b, shift(i, dim), axis=0).data)
    return 8 + len(text) + layers * nbytes


def graph(layers: int, dim: int):
    from rlx.ir import Activation, Graph, Shape

    g = Graph("big")
    h = g.input("x", Shape([1, dim]))
    for i in range(layers):
        h = g.unary(Activation.TANH, g.matmul(h, g.param(f"w{i}", Shape([dim, dim]))))
    g.set_outputs([h])
    return g


def feeds(dim: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(SEED + 1).uniform(-1, 1, (1, dim)).astype(np.float32)}


def reference(layers: int, dim: int) -> np.ndarray:
    b = base(dim).astype(np.float64)
    h = feeds(dim)["x"].astype(np.float64)
    for i in range(layers):
        h = np.tanh(np.roll(h, -shift(i, dim), axis=1) @ b)
    return h


def _bake(source: str, out: str, profile: str, layers: int, dim: int) -> dict:
    import rlx

    bundle = rlx.load_weights(source)
    file, report = rlx.bake_bundle(graph(layers, dim), bundle,
                                   rlx.BakeOptions.from_profile(profile))
    rlx.write_rlx(out, file)
    return {"weight_bytes": report.weight_bytes,
            "encoded": report.optimize.encoded, "dead": report.optimize.dead_removed}


def _run(path: str, layers: int, dim: int) -> dict:
    import rlx

    (y,) = rlx.load(path, engine="numpy").run(feeds(dim))
    return {"y": np.asarray(y, np.float64).reshape(-1).tolist()}


def main(argv: list[str]) -> None:
    command, *args = argv
    layers, dim = int(args[-2]), int(args[-1])
    start = time.process_time()
    result = (_bake(args[0], args[1], args[2], layers, dim) if command == "bake"
              else _run(args[0], layers, dim))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result.update(peak_rss=usage.ru_maxrss * 1024, cpu=time.process_time() - start)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
