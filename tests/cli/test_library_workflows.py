"""The library's workflows, which the CLI only calls: `load_model` for each input kind,
`overlay_weights`, `write_artifact` per format and container, and `bake_file`, whose bytes
are the CLI's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from safetensors.numpy import save_file

from rlx import BakeOptions, bake, bake_file, load, read_rlx, write_rlx
from rlx.artifact import read_rlxp_package, write_artifact
from rlx.errors import ArtifactError, BakeError, ModelImportError, WeightError
from rlx.frontends import load_model
from rlx.ir import graph_to_json
from rlx.weights import LoadedWeight, WeightBundle, overlay_weights
from tests.cli.conftest import PASSWORD, mlp_onnx


def _onnxruntime(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _tree_bytes(path: Path) -> dict[str, bytes]:
    """A file's bytes, or every file of a dir package by its relative path."""
    if path.is_dir():
        return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
                if p.is_file()}
    return {"": path.read_bytes()}


# --- load_model ---------------------------------------------------------------------------


def test_load_model_reads_onnx_as_import_onnx_does(files, tmp_path):
    model = load_model(files.onnx)
    graph, bindings = model  # unpacks like import_onnx
    assert model.source == f"onnx:{files.onnx}" and model.default_weights is None
    assert model.onnx_op_types == dict(Counter(n.op_type for n in onnx.load(files.onnx).graph.node))
    file, _ = bake(graph, bindings)
    write_rlx(tmp_path / "m.rlx", file)
    (ours,) = load(tmp_path / "m.rlx", engine="numpy").run({"x": files.x})
    np.testing.assert_allclose(ours, _onnxruntime(files.onnx, files.x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fix", [{"input_shapes": {"x": [4, 784]}}, {"dims": {"n": 4}}])
def test_load_model_fixes_onnx_input_dims(files, tmp_path, fix):
    onnx.save(mlp_onnx(files.weights, batch="n"), tmp_path / "dynamic.onnx")
    graph, _ = load_model(tmp_path / "dynamic.onnx", **fix)
    (x,) = graph.inputs()
    assert tuple(x.tensor_shape.dims) == (4, 784)


def test_load_model_reads_graph_json(files):
    model = load_model(files.graph_json)
    assert graph_to_json(model.graph) == files.graph_json.read_text()
    assert model.bindings == {} and model.default_weights is None
    assert model.source == f"json:{files.graph_json}"


def test_load_model_reads_a_bundle_folder_and_names_its_weights(files, tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "model.json").write_text(files.graph_json.read_text())
    save_file(files.weights, str(bundle / "weights.safetensors"))
    model = load_model(bundle)
    assert model.source == f"bundle:{bundle}"
    assert model.default_weights == bundle / "weights.safetensors"
    assert {n.source_name for n in model.graph.params()} == set(files.weights)


@pytest.mark.parametrize(("given", "match"), [
    ("rlx", "is an .rlx artifact already"),
    ("encrypted", "is an encrypted .rlx artifact already"),
    ("npz", r"is a zip archive \(an .npz\?\), not a model"),
])
def test_load_model_refuses_what_is_not_a_model(files, given, match):
    with pytest.raises(ModelImportError, match=match):
        load_model(getattr(files, given))


def test_load_model_refuses_input_dims_for_graph_json(files):
    with pytest.raises(ModelImportError, match="apply to ONNX models"):
        load_model(files.graph_json, dims={"batch": 1})


# --- overlay_weights ----------------------------------------------------------------------


def test_overlay_lays_the_file_over_the_model_and_packed_names_win():
    own = {"a": np.zeros(2, np.float32), "b": np.ones(2, np.float32)}
    packed = LoadedWeight("b", (2,), "Q8_0", np.zeros(34, np.uint8))
    loaded = WeightBundle({"a": np.full(2, 7, np.float32), "c": np.ones(1)}, [packed], "w.st")
    merged = overlay_weights(own, loaded, params={"a", "b"})
    assert set(merged.tensors) == {"a", "c"} and merged.tensors["a"][0] == 7
    assert merged.packed == [packed] and merged.source == "w.st"


def test_overlay_refuses_a_file_matching_no_param():
    loaded = WeightBundle({"other": np.ones(1)}, source="w.safetensors")
    with pytest.raises(WeightError, match=r"weights file w.safetensors matches none of the "
                                          r"graph's params \(weights: other; params: a, b\)"):
        overlay_weights({}, loaded, params={"a", "b"})


# --- write_artifact -----------------------------------------------------------------------


def test_write_artifact_rlx_is_write_rlx(files, tmp_path):
    file = read_rlx(files.rlx)
    written = write_artifact(tmp_path / "a.rlx", file)
    write_rlx(tmp_path / "b.rlx", file)
    assert written.as_dict() == {"format": "rlx", "container": None}
    assert (tmp_path / "a.rlx").read_bytes() == (tmp_path / "b.rlx").read_bytes()


def test_write_artifact_encrypts_rlx(files, tmp_path):
    write_artifact(tmp_path / "e.rlx", read_rlx(files.rlx), password=PASSWORD)
    again = read_rlx(tmp_path / "e.rlx", password=PASSWORD)
    np.testing.assert_array_equal(again.tensor("w1"), files.weights["w1"])


@pytest.mark.parametrize(("name", "container", "expected"), [
    ("m.rlxp", None, "flat"), ("m.rlxp.zip", None, "zip"), ("m.pkg", "dir", "dir"),
    ("m.rlxp", "zip", "zip"),
])
def test_write_artifact_packages_in_each_container(files, tmp_path, name, container, expected):
    file = read_rlx(files.rlx)
    written = write_artifact(tmp_path / name, file, container=container, tier="warm")
    assert written.as_dict() == {"format": "rlxp", "container": expected, "tier": "warm"}
    package = read_rlxp_package(tmp_path / name)
    assert package.container == expected
    assert {row["tier"] for row in package.tensors} == {"warm"}
    for name_ in files.weights:
        np.testing.assert_array_equal(package.file.tensor(name_), files.weights[name_])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"format": "rlx", "container": "zip"}, "apply to .rlxp output only"),
    ({"format": "rlxp", "password": "pw"}, "not encrypted"),
    ({"format": "onnx"}, "unknown artifact format 'onnx'"),
])
def test_write_artifact_refuses_options_of_the_other_format(files, tmp_path, kwargs, match):
    with pytest.raises(ArtifactError, match=match):
        write_artifact(tmp_path / "out.rlx", read_rlx(files.rlx), **kwargs)
    assert not (tmp_path / "out.rlx").exists()


def test_write_artifact_refuses_a_missing_folder(files, tmp_path):
    with pytest.raises(ArtifactError, match="folder .* does not exist"):
        write_artifact(tmp_path / "no" / "out.rlx", read_rlx(files.rlx))


# --- bake_file ----------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "args", "kwargs"), [
    ("onnx", [], {}),
    ("graph_json", ["--profile", "size"], {"profile": "size"}),
    ("onnx", ["--container", "zip", "--tier", "cold"], {"container": "zip", "tier": "cold"}),
    ("onnx", ["--format", "rlxp", "--container", "dir"], {"format": "rlxp", "container": "dir"}),
])
def test_bake_file_writes_the_bytes_the_cli_writes(cli, files, tmp_path, source, args, kwargs):
    weights = ["--weights", files.npz] if source == "graph_json" else []
    suffix = ".rlxp" if "container" in kwargs else ".rlx"
    by_cli, by_library = tmp_path / f"cli{suffix}", tmp_path / f"lib{suffix}"
    model = getattr(files, source)
    assert cli("bake", model, "-o", by_cli, *weights, *args, "-q").code == 0
    baked = bake_file(model, by_library, weights=files.npz if weights else None, **kwargs)
    assert _tree_bytes(by_library) == _tree_bytes(by_cli)
    assert baked.written.format == ("rlxp" if "container" in kwargs else "rlx")


def test_bake_file_reports_the_weights_it_laid_over(files, tmp_path):
    baked = bake_file(files.graph_json, tmp_path / "m.rlx", weights=files.npz)
    assert baked.weights is not None and baked.weights.path == str(files.npz)
    assert (baked.weights.dense, baked.weights.packed) == (len(files.weights), 0)
    assert baked.weights_in_bytes == sum(v.nbytes for v in files.weights.values())
    assert baked.report.params_baked == len(files.weights)
    (ours,) = load(tmp_path / "m.rlx", engine="numpy").run({"x": files.x})
    np.testing.assert_allclose(ours, _onnxruntime(files.onnx, files.x), rtol=1e-5, atol=1e-5)


def test_bake_file_checks_the_output_before_the_work(files, tmp_path):
    with pytest.raises(ArtifactError, match="not encrypted"):
        bake_file(tmp_path / "missing.onnx", tmp_path / "m.rlxp", password="pw")


def test_bake_file_takes_a_profile_or_options(files, tmp_path):
    with pytest.raises(BakeError, match="not both"):
        bake_file(files.onnx, tmp_path / "m.rlx", profile="size", options=BakeOptions())
