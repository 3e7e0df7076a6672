"""`rlx-bake` and .rlxp: bake/import-onnx/convert write packages (format from the extension or
--format, --container, --tier), run/inspect/verify read them, --password is refused for
them, the reference's bare form works, HIR inputs are refused with what to do instead."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from rlx.artifact import read_rlxp_package
from tests.cli.conftest import PASSWORD, assert_error


def outputs(cli, path, files) -> np.ndarray:
    """The logits `rlx-bake run` gives on one engine at one thread: bit for bit comparable
    between a file and its package (auto may measure the two apart and pick two engines,
    and BLAS sums in another order at another thread count, which the numpy engine lowers
    on a busy machine)."""
    out = path.parent / f"{path.name}.out.npz"
    result = cli("run", path, "--input", f"x={files.x_npy}", "--output", out, "--engine",
                 "numpy", "--threads", "1", "-q")
    assert result.code == 0, result
    with np.load(out) as saved:
        return saved["logits"]


@pytest.mark.parametrize(("name", "flags", "container"), [
    ("m.rlxp", [], "flat"),
    ("m.rlxp.zip", [], "zip"),
    ("m.pkg", ["--format", "rlxp", "--container", "dir"], "dir"),
    ("m.rlxp", ["--tier", "warm"], "flat"),
    ("m.bin", ["--container", "zip", "--tier", "cold"], "zip"),
])
def test_bake_writes_packages_that_run_like_the_rlx(cli, files, tmp_path, name, flags,
                                                    container):
    assert cli("bake", files.onnx, "-o", tmp_path / "m.rlx", "-q").code == 0
    result = cli("bake", files.onnx, "-o", tmp_path / name, *flags, "--json")
    assert result.code == 0, result
    data = result.json()
    assert (data["format"], data["container"]) == ("rlxp", container)
    package = read_rlxp_package(tmp_path / name, verify="full")
    assert package.container == container
    tier = flags[flags.index("--tier") + 1] if "--tier" in flags else "hot"
    assert {row["tier"] for row in package.tensors} == {tier}
    ours = outputs(cli, tmp_path / name, files)
    np.testing.assert_array_equal(ours, outputs(cli, tmp_path / "m.rlx", files))
    np.testing.assert_allclose(ours, files.expected(), rtol=1e-4, atol=1e-4)


def test_tensor_tier_and_verify_and_inspect(cli, files, tmp_path):
    out = tmp_path / "m.rlxp"
    result = cli("bake", files.onnx, "-o", out, "--tensor-tier", "w1=cold", "-q")
    assert result.code == 0, result
    tiers = {r["name"]: r["tier"] for r in read_rlxp_package(out).tensors}
    assert tiers["w1"] == "cold" and tiers["w2"] == "hot"
    inspected = cli("inspect", out, "--json")
    assert inspected.code == 0, inspected
    data = inspected.json()
    assert data["package"]["container"] == "flat" and data["checksums"]["ok"]
    assert data["package"]["tiers"]["cold"]["tensors"] == 1
    assert data["package"]["io"]["inputs"][0]["name"] == "x"
    assert "storage tiers" in cli("inspect", out).out
    verified = cli("verify", out, "--onnx", files.onnx, "--json")
    assert verified.code == 0 and verified.json()["ok"], verified


def test_convert_both_ways_and_refuses_encrypted_input(cli, files, tmp_path):
    result = cli("convert", files.rlx, "-o", tmp_path / "m.rlxp.zip", "--tier", "warm",
                 "--json")
    assert result.code == 0, result
    assert result.json()["container"] == "zip"
    with zipfile.ZipFile(tmp_path / "m.rlxp.zip") as archive:
        assert "weights/shards/000.pack.bin" in archive.namelist()
    back = cli("convert", tmp_path / "m.rlxp.zip", "-o", tmp_path / "back.rlx", "-q")
    assert back.code == 0, back
    np.testing.assert_array_equal(outputs(cli, tmp_path / "back.rlx", files),
                                  outputs(cli, files.rlx, files))
    assert_error(cli("convert", files.encrypted, "-o", tmp_path / "e.rlxp"),
                 "is encrypted; convert reads plain files: decrypt it first")


def test_password_with_rlxp_is_refused(cli, files, tmp_path, monkeypatch):
    monkeypatch.setenv("PW", PASSWORD)
    assert_error(cli("bake", files.onnx, "-o", tmp_path / "m.rlxp", "--password-env", "PW"),
                 r"--password with \.rlxp output is not supported")
    assert not (tmp_path / "m.rlxp").exists()
    assert_error(cli("bake", files.onnx, "-o", tmp_path / "m.rlx", "--tier", "warm"),
                 "apply to .rlxp output only")
    assert_error(cli("inspect", files.rlx.parent / "none.rlxp"), "No such file")


def test_import_onnx_runs_the_full_bake(cli, files, tmp_path):
    result = cli("import-onnx", files.onnx, "-o", tmp_path / "m.rlxp", "--profile", "size",
                 "--json")
    assert result.code == 0, result
    package = read_rlxp_package(tmp_path / "m.rlxp")
    assert {"onnx_import", "executable_graph"} <= set(package.manifest["features"])
    assert package.manifest["producer"] == "rlx-bake/onnx_import"
    schemes = {row["scheme"] for row in package.tensors}
    assert "gguf_q8_0" in schemes  # the size profile packed the matmul weights
    assert result.json()["report"]["optimize"]["quant_packed"] >= 1
    ours = outputs(cli, tmp_path / "m.rlxp", files)
    cosine = float(np.sum(ours * files.expected()) / np.linalg.norm(ours)
                   / np.linalg.norm(files.expected()))
    assert cosine > 0.999
    weights_only = cli("import-onnx", files.onnx, "-o", tmp_path / "w.rlxp", "--no-graph",
                       "--container", "zip", "-q")
    assert weights_only.code == 0, weights_only
    package = read_rlxp_package(tmp_path / "w.rlxp")
    assert package.manifest["graph_encoding"] == "none" and package.container == "zip"
    names = {row["name"] for row in package.tensors}
    assert {"w1", "w2"} <= names
    assert_error(cli("import-onnx", files.graph_json, "-o", tmp_path / "j.rlxp"),
                 "import-onnx reads .onnx models")


def test_the_bare_form_is_bake(cli, files, tmp_path):
    result = cli(files.graph_json, "-w", files.npz, "-o", tmp_path / "m.rlxp", "-q")
    assert result.code == 0, result
    np.testing.assert_allclose(outputs(cli, tmp_path / "m.rlxp", files), files.expected(),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["name", "suffix", "key", "bundle"])
def test_hir_inputs_are_refused_with_what_to_do(cli, files, tmp_path, kind):
    body = json.dumps({"fusion_policy": "default", "functions": []})
    if kind == "name":
        path = tmp_path / "model.hir.json"
    elif kind == "suffix":
        path = tmp_path / "encoder.hir.json"
    elif kind == "key":
        path = tmp_path / "graph.json"
    else:
        path = tmp_path / "bundle"
        path.mkdir()
        (path / "model.hir.json").write_text(body)
    if kind != "bundle":
        path.write_text(body)
    assert_error(cli("bake", path, "-o", tmp_path / "m.rlx"),
                 "HIR module .* export the model to ONNX .* graph JSON")


def test_an_mlx_folder_bakes_packed_through_the_cli(cli, tmp_path):
    """`-w <MLX folder> --weights-policy auto` keeps the packs (DequantMatMul), and the
    package's outputs match mlx.core.quantized_matmul."""
    pytest.importorskip("mlx.core")
    from rlx.ir import graph_to_json
    from tests.weights.test_mlx_folder import K, mlp, mlx_folder, oracle

    folder, info = mlx_folder(tmp_path, "affine", 4, 64)
    graph = tmp_path / "mlp.json"
    graph.write_text(graph_to_json(mlp(True)))
    # the ternary/quant passes need f32 weights (the reference's rule 1): switch them off
    result = cli(graph, "-w", folder, "--weights-policy", "auto", "--no-ternary", "-o",
                 tmp_path / "m.rlxp", "--json")
    assert result.code == 0, result
    data = result.json()
    assert data["weights"]["packed"] == 6 and data["weights"]["verdict"].startswith("NO-GO")
    assert data["report"]["unused_bindings"] == []
    package = read_rlxp_package(tmp_path / "m.rlxp")
    assert "mlx_packed" in package.manifest["features"]
    x = np.random.default_rng(3).standard_normal((4, K)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ran = cli("run", tmp_path / "m.rlxp", "--input", f"x={tmp_path / 'x.npy'}", "--output",
              tmp_path / "y.npz", "-q")
    assert ran.code == 0, ran
    with np.load(tmp_path / "y.npz") as saved:
        (out,) = saved.values()
    np.testing.assert_allclose(out, oracle(info, x), rtol=1e-4, atol=1e-4)


def test_a_dduf_bundle_as_weights(cli, tmp_path):
    pytest.importorskip("huggingface_hub")
    from rlx.ir import Graph, Shape, graph_to_json
    from tests.weights.test_dduf import dduf

    path = dduf(tmp_path, clash=False)
    g = Graph("toy")
    x = g.input("x", Shape((2, 3)))
    g.set_outputs([g.matmul(x, g.param("proj", Shape((3, 5))))])
    (tmp_path / "g.json").write_text(graph_to_json(g))
    result = cli("bake", tmp_path / "g.json", "-w", path, "--weights-policy", "auto",
                 "--no-ternary", "-o", tmp_path / "m.rlxp", "--json")
    assert result.code == 0, result
    weights = result.json()["weights"]
    assert "DDUF" in weights["verdict"] and weights["dense"] == 5
    assert "proj" in {r["name"] for r in read_rlxp_package(tmp_path / "m.rlxp").tensors}


def test_a_weights_only_package_does_not_pretend_to_run(cli, files, tmp_path):
    assert cli("import-onnx", files.onnx, "-o", tmp_path / "w.rlxp", "--no-graph",
               "-q").code == 0
    assert_error(cli("run", tmp_path / "w.rlxp", "--input", f"x={files.x_npy}"),
                 "holds weights only .* no graph to run")
    assert cli("inspect", tmp_path / "w.rlxp", "-q").code == 0
