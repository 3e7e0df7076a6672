"""Fixtures of the CLI tests: the reference MLP as graph JSON, weights, ONNX and .rlx files,
and `cli(...)`, which runs the real entry point `rlx.cli.main` in-process."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import write_rlx
from rlx.cli import main
from rlx.ir import graph_to_json
from tests.baking.models import mlp_forward, mlp_graph, mlp_weights

PASSWORD = "correct horse"


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys):
    def run(*argv) -> Result:
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)
    return run


def assert_error(result: Result, match: str, code: int = 3) -> None:
    """Exit `code`, nothing on stdout, and the error as ONE line `error: ...` on stderr."""
    assert result.code == code, result
    assert result.out == ""
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == [lines[-1]], result.err
    assert re.search(match, errors[0]), errors[0]


def mlp_onnx(weights: dict[str, np.ndarray], batch: int = 32) -> onnx.ModelProto:
    """The reference MLP written with onnx.helper, weights as initializers."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["l0"]),
        helper.make_node("Add", ["l0", "b2"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 784])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@dataclass(frozen=True)
class Files:
    """Model files shared by the CLI tests (read-only: tests write into their tmp_path)."""

    folder: Path
    weights: dict[str, np.ndarray]
    x: np.ndarray

    @property
    def graph_json(self) -> Path:
        return self.folder / "mlp.json"

    @property
    def npz(self) -> Path:
        return self.folder / "weights.npz"

    @property
    def onnx(self) -> Path:
        return self.folder / "mlp.onnx"

    @property
    def x_npy(self) -> Path:
        return self.folder / "x.npy"

    @property
    def rlx(self) -> Path:
        """The MLP baked with the exact profile (compact)."""
        return self.folder / "mlp.rlx"

    @property
    def encrypted(self) -> Path:
        return self.folder / "mlp-encrypted.rlx"

    def expected(self) -> np.ndarray:
        return mlp_forward(self.x, self.weights)


@pytest.fixture(scope="session")
def files(tmp_path_factory) -> Files:
    folder = tmp_path_factory.mktemp("cli-models")
    weights = mlp_weights()
    x = np.random.default_rng(1).standard_normal((32, 784)).astype(np.float32)
    f = Files(folder, weights, x)
    f.graph_json.write_text(graph_to_json(mlp_graph()))
    np.savez(f.npz, **weights)
    np.save(f.x_npy, x)
    onnx.save(mlp_onnx(weights), f.onnx)
    baked, _ = bake(mlp_graph(), weights, BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(f.rlx, baked)
    write_rlx(f.encrypted, baked, password=PASSWORD)
    return f
