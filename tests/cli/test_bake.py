"""`rlx-bake bake`: inputs (graph JSON, bundle folder, ONNX), options, summary, errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from safetensors.numpy import save_file

from rlx.artifact import read_rlx
from rlx.runtime import Session
from tests.cli.conftest import PASSWORD, assert_error


def run_file(path, x, password=None):
    file = read_rlx(path, password=password)
    return Session().compile(file.into_runtime_graph()).run({"x": x})[0]


def test_bake_graph_json_with_weights(cli, files, tmp_path):
    out = tmp_path / "m.rlx"
    result = cli("bake", files.graph_json, "--weights", files.npz, "-o", out)
    assert result.code == 0, result.err
    for text in ("what each step did", "matmuls packed as TQ2_0", "weight table by encoding",
                 "gguf_tq2_0", "file size"):
        assert text in result.out
    np.testing.assert_allclose(run_file(out, files.x), files.expected(), rtol=1e-4, atol=1e-4)


def test_bake_json_summary(cli, files, tmp_path):
    out = tmp_path / "m.rlx"
    d = cli("bake", files.graph_json, "-w", files.npz, "-o", out, "--profile", "size",
            "--json").json()
    assert d["command"] == "bake" and d["output"] == str(out)
    assert d["file_bytes"] == out.stat().st_size and not d["encrypted"]
    report = d["report"]
    assert d["computing_nodes"]["before"] == 5  # 2 MatMul, 2 Add, 1 Relu
    assert report["params_baked"] == 4
    assert report["optimize"]["ternary_packed"] == 1 and report["optimize"]["quant_packed"] == 1
    encodings = {e["encoding"]: e for e in d["by_encoding"]}
    assert encodings["gguf_tq2_0"]["bytes"] == 196 * 66  # 784 * 64 values in 256-blocks
    assert encodings["gguf_q8_0"]["bytes"] == 20 * 34
    assert d["weights_in_bytes"] == sum(w.nbytes for w in files.weights.values())
    assert d["weights_out_bytes"] == sum(e["bytes"] for e in d["by_encoding"])


@pytest.mark.parametrize("profile", ["merge", "exact"])
@pytest.mark.parametrize("memory", ["duplex", "runtime", "compact"])
def test_weights_written_as_constant_nodes_count_in_and_out(cli, files, tmp_path, profile,
                                                           memory):
    """Some exporters write weights as Constant nodes, not initializers: they are the
    model's weights all the same, and a lossless bake keeps every byte of them."""
    model = onnx.load(files.onnx)
    inits = {t.name: t for t in model.graph.initializer}
    constants = [onnx.helper.make_node("Constant", [], [name], value=tensor)
                 for name, tensor in inits.items()]
    del model.graph.initializer[:]
    nodes = [*constants, *model.graph.node]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    path = tmp_path / "constants.onnx"
    onnx.save(model, path)
    d = cli("bake", path, "-o", tmp_path / "c.rlx", "--profile", profile, "--memory", memory,
            "--no-ternary", "--json").json()
    weights = sum(w.nbytes for w in files.weights.values())
    assert d["weights_in_bytes"] == weights
    assert d["weights_out_bytes"] == weights  # f32 kept: nothing to save, nothing lost


@pytest.mark.parametrize("order", [
    ["--no-ternary", "--profile", "size"],
    ["--profile", "size", "--no-ternary"],
])
def test_profile_first_then_switches_whatever_the_order(cli, files, tmp_path, order):
    d = cli("bake", files.graph_json, "-w", files.npz, "-o", tmp_path / "m.rlx", *order,
            "--json").json()
    assert d["options"]["profile"] == "size" and d["options"]["quant"] is True
    assert d["options"]["ternary"] is False
    assert d["report"]["optimize"]["ternary_packed"] == 0
    # the -1/0/+1 layer lies on an int8 grid of steps of 1: stored exactly (q8_f32)
    assert d["report"]["optimize"]["encoded"] == {"gguf_q8_0": 1, "q8_f32": 1, "f16": 1}


def test_memory_alias_cleanup_and_switch(cli, files, tmp_path):
    d = cli("bake", files.graph_json, "-w", files.npz, "-o", tmp_path / "m.rlx", "--memory",
            "both", "--no-cleanup", "--dce", "--opt", "lossless", "--json").json()
    opts = d["options"]
    assert opts["memory"] == "duplex" and opts["profile"] == "exact"
    assert (opts["constant_folding"], opts["algebraic_simplify"], opts["dce"]) == (False, False,
                                                                                   True)


def test_bundle_folder_uses_its_weights(cli, files, tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "model.json").write_text(files.graph_json.read_text())
    save_file(files.weights, bundle / "weights.safetensors")
    out = tmp_path / "m.rlx"
    d = cli("bake", bundle, "-o", out, "--json").json()
    assert d["source"] == f"bundle:{bundle}"
    assert d["weights"]["path"] == str(bundle / "weights.safetensors")
    assert d["report"]["params_remaining"] == []
    np.testing.assert_allclose(run_file(out, files.x), files.expected(), rtol=1e-4, atol=1e-4)


def test_bake_onnx(cli, files, tmp_path):
    out = tmp_path / "m.rlx"
    d = cli("bake", files.onnx, "-o", out, "--json").json()
    assert d["source"].startswith("onnx:") and d["report"]["params_remaining"] == []
    assert d["report"]["optimize"]["ternary_packed"] == 1  # w1 is exactly ternary
    np.testing.assert_allclose(run_file(out, files.x), files.expected(), rtol=1e-4, atol=1e-4)


def test_bake_encrypted_with_password_env(cli, files, tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_TEST_PASSWORD", PASSWORD)
    out = tmp_path / "m.rlx"
    d = cli("bake", files.graph_json, "-w", files.npz, "-o", out, "--password-env",
            "RLX_TEST_PASSWORD", "--json").json()
    assert d["encrypted"] and out.read_bytes()[:8] == b"RLXENC01"
    np.testing.assert_allclose(run_file(out, files.x, PASSWORD), files.expected(), rtol=1e-4,
                               atol=1e-4)


def test_unbound_params_warn(cli, files, tmp_path):
    result = cli("bake", files.graph_json, "-o", tmp_path / "m.rlx", "--quiet")
    assert result.code == 0 and result.out == ""
    assert "warning: no weights for param(s) b1, b2, w1, w2" in result.err


def test_weights_matching_no_param(cli, files, tmp_path):
    other = tmp_path / "other.npz"
    np.savez(other, a=np.zeros(3, np.float32))
    assert_error(cli("bake", files.graph_json, "-w", other, "-o", tmp_path / "m.rlx"),
                 r"weights file .*other\.npz matches none of the graph's params \(weights: a; "
                 r"params: b1, b2, w1, w2\)")
    assert not (tmp_path / "m.rlx").exists()


@pytest.mark.parametrize("option, value, match", [
    ("--profile", "fastest", r"unknown bake profile 'fastest'; expected one of merge"),
    ("--memory", "ram", r"unknown memory mode 'ram'; expected duplex, runtime, or compact"),
    ("--weights-policy", "int4", r"unknown --weights-policy int4"),
])
def test_unknown_option_values_are_usage_errors(cli, files, tmp_path, option, value, match):
    assert_error(cli("bake", files.graph_json, "-o", tmp_path / "m.rlx", option, value), match,
                 code=2)


@pytest.mark.parametrize("make, match", [
    (lambda p: None, r"is not a file or directory"),
    (lambda p: p.write_text("{not json"), r"m\.json"),
])
def test_bad_inputs(cli, tmp_path, make, match):
    source = tmp_path / "m.json"
    make(source)
    assert_error(cli("bake", source, "-o", tmp_path / "m.rlx"), match)


def test_missing_onnx_file(cli, tmp_path):
    assert_error(cli("bake", tmp_path / "none.onnx", "-o", tmp_path / "m.rlx"),
                 r"cannot read .*none\.onnx: No such file or directory")


def test_missing_password_variable(cli, files, tmp_path, monkeypatch):
    monkeypatch.delenv("RLX_UNSET_VARIABLE", raising=False)
    assert_error(cli("bake", files.graph_json, "-o", tmp_path / "m.rlx", "--password-env",
                     "RLX_UNSET_VARIABLE"), r"environment variable RLX_UNSET_VARIABLE is not set")


def test_output_is_required(cli, files):
    assert_error(cli("bake", files.graph_json), r"the following arguments are required: "
                                                r"-o/--output", code=2)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("min_cosine, some_kept", [("0.99", False), ("0.9999999999", True)])
def test_calibrated_size_bake_reports_in_plain_words(cli, files, tmp_path, min_cosine,
                                                     some_kept):
    """After calibrating, no advice to calibrate; one cosine column per measurement (the
    first try's beside the stored one only when the guard changed something); the weight
    bytes in the source's and the file's terms, a ratio only when it says something."""
    import onnxruntime as ort

    feeds, out = tmp_path / "feeds.npz", tmp_path / "m.rlx"
    np.savez(feeds, x=files.x)
    argv = ("bake", files.onnx, "-o", out, "--profile", "size", "--calibrate", feeds,
            "--min-cosine", min_cosine)
    d = cli(*argv, "--json").json()
    text = cli(*argv).out
    for jargon in ("--calibrate", "folded bindings", "bytes saved", "IR nodes"):
        assert jargon not in text
    [header] = [t for t in text.splitlines() if t.strip().startswith("output ")]
    columns = ["cosine, all encoded", "max abs, all encoded", "cosine, as stored",
               "max abs, as stored"] if some_kept else ["cosine", "max abs"]
    assert [c.strip() for c in header.split("  ") if c.strip()] == ["output", *columns]
    assert any(r["kept"] for r in d["report"]["accuracy"]["tensors"]) is some_kept
    expected = ort.InferenceSession(str(files.onnx)).run(None, {"x": files.x})[0]
    [row] = [t for t in text.splitlines() if t.strip().startswith("logits ")]
    assert abs(float(row.split()[-2]) - _cosine(run_file(out, files.x), expected)) < 2e-6
    source = sum(numpy_helper.to_array(i).nbytes for i in onnx.load(files.onnx).graph.initializer)
    [weights] = [t for t in text.splitlines() if t.strip().startswith("weight bytes ")]
    stored = d["weights_out_bytes"]
    assert weights.split("weight bytes", 1)[1].strip() == (
        f"{source:,} in the source -> {stored:,} in the file ({source / stored:.1f}x smaller)")


def test_an_old_profile_name_still_bakes_and_says_its_new_name(cli, files, tmp_path):
    result = cli("bake", files.onnx, "-o", tmp_path / "m.rlx", "--profile", "compact",
                 "--json")
    assert result.code == 0 and result.json()["options"]["profile"] == "size"
    warnings = [t for t in result.err.splitlines() if "compact" in t]
    assert warnings == ["warning: bake profile 'compact' is an old name: use 'size'"]
    usage = cli("bake", "--help").out
    assert "compact" not in usage.split("--profile", 1)[1].split("--memory", 1)[0]


def test_an_explicit_packed_policy_is_honoured_under_the_exact_profile(cli, files, tmp_path):
    """A Q8_0 pack in a GGUF file stays packed with --weights-policy packed (the exact
    profile's ternary packing needs f32 for the dense weights only); auto decodes it."""
    import gguf
    from gguf.quants import quantize

    q8 = gguf.GGMLQuantizationType.Q8_0
    path, w2_nk = tmp_path / "w.gguf", files.weights["w2"].T.copy()  # GGUF stores [N, K]
    writer = gguf.GGUFWriter(str(path), "test")
    writer.add_tensor("w2", quantize(w2_nk, q8), raw_dtype=q8)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = tmp_path / "m.rlx"  # w2 only: the numbers are checked in tests/baking
    d = cli("bake", files.graph_json, "-w", path, "--weights-policy", "packed", "-o", out,
            "--json").json()
    assert d["weights"]["verdict"].startswith("NO-GO: weights-policy=packed")
    assert {e["encoding"]: e["tensors"] for e in d["by_encoding"]}.get("gguf_q8_0") == 1
    auto = cli("bake", files.graph_json, "-w", path, "--weights-policy", "auto", "-o",
               tmp_path / "a.rlx", "--json").json()
    assert auto["weights"]["verdict"].startswith("GO: bake ternary/quant rewrites")
    assert "gguf_q8_0" not in {e["encoding"] for e in auto["by_encoding"]}
