"""`rlx-bake tensors` against the weights baked in, and the errors every command shares:
exit codes, JSON errors, "did you mean", hints for files that are not artifacts."""

from __future__ import annotations

import gguf
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file, save_file

from rlx.cli import main
from tests.cli.conftest import assert_error
from tests.cli.test_bake import run_file


@pytest.mark.parametrize("profile", ["exact", "size"])
def test_tensors_to_safetensors(cli, files, tmp_path, profile):
    baked, out = tmp_path / "m.rlx", tmp_path / "w.safetensors"
    cli("bake", files.graph_json, "-w", files.npz, "-o", baked, "--profile", profile)
    d = cli("tensors", baked, "-o", out, "--json").json()
    back = load_file(out)  # the safetensors package reads what rlx wrote
    assert set(back) == set(files.weights) == {r["name"] for r in d["tensors"]}
    for name, original in files.weights.items():
        assert back[name].shape == original.shape and back[name].dtype == original.dtype
        if profile == "size" and name == "w2":  # Q8_0
            np.testing.assert_allclose(back[name], original, atol=np.abs(original).max() / 127)
        elif profile == "size" and name == "b1":  # 64 values: f16
            np.testing.assert_array_equal(back[name], original.astype(np.float16))
        else:
            np.testing.assert_array_equal(back[name], original)
    assert d["file_bytes"] == out.stat().st_size
    assert {r["name"]: r["encoding"] for r in d["tensors"]}["w1"] == "gguf_tq2_0"


def test_tensors_to_npz_with_names(cli, files, tmp_path):
    out = tmp_path / "w.npz"
    result = cli("tensors", files.rlx, "-o", out, "--names", "w1", "b2")
    assert result.code == 0, result.err
    with np.load(out) as archive:
        assert sorted(archive.files) == ["b2", "w1"]
        np.testing.assert_array_equal(archive["w1"], files.weights["w1"])
    assert "2 tensor(s)" in result.out


def test_tensors_errors(cli, files, tmp_path):
    assert_error(cli("tensors", files.rlx, "-o", tmp_path / "w.npz", "--names", "w1x"),
                 r"no weight named 'w1x'; did you mean w1\?")
    assert_error(cli("tensors", files.rlx, "-o", tmp_path / "w.bin"),
                 r"expected a \.safetensors or \.npz file name")
    assert not list(tmp_path.iterdir())  # nothing half-written


# --- exit codes and JSON errors -----------------------------------------------------------


def test_json_error_is_an_object_on_stdout(cli, tmp_path):
    missing = tmp_path / "missing.rlx"
    result = cli("inspect", missing, "--json")
    assert result.code == 3
    error = result.json()["error"]
    assert error["kind"] == "error" and error["exit_code"] == 3
    assert error["type"] == "FileNotFoundError" and str(missing) in error["message"]
    assert result.err == f"error: {error['message']}\n"  # the same line on stderr
    usage = cli("inspect", "--json")  # the file is missing: bad usage
    assert usage.code == 2 and usage.json()["error"]["kind"] == "usage"
    assert "the following arguments are required: file" in usage.json()["error"]["message"]


def test_no_json_means_nothing_on_stdout(cli, tmp_path):
    assert_error(cli("inspect", tmp_path / "missing.rlx"), "missing.rlx")


@pytest.mark.parametrize("argv, suggestion", [
    (["insepct", "x.rlx"], r"invalid choice: 'insepct'.*\(did you mean inspect\?\)"),
    (["bake", "m.onnx", "-o", "m.rlx", "--quantize"],
     r"unrecognized arguments: --quantize \(did you mean --quant.*\?\) "
     r"\(see 'rlx-bake bake --help'\)"),
    (["verify", "m.rlx", "--onnx", "m.onnx", "--rtool", "1"], r"did you mean --rtol"),
])
def test_did_you_mean(cli, argv, suggestion):
    assert_error(cli(*argv), suggestion, code=2)


def test_a_command_option_before_the_command(cli):
    result = cli("--json", "inspect", "m.rlx")
    assert result.code == 2
    assert "--json is an option of 'inspect': put it after" in result.json()["error"]["message"]


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "x"])
def test_tolerances_are_validated(cli, files, value):
    assert_error(cli("verify", files.rlx, "--onnx", files.onnx, "--rtol", value),
                 rf"argument --rtol: expected a number >= 0, got '{value}'", code=2)
    assert_error(cli("verify", files.rlx, "--onnx", files.onnx, "--atol", value),
                 r"argument --atol: expected a number >= 0", code=2)


def test_failed_check_exits_1_and_error_3_are_apart(cli, files, tmp_path):
    damaged = tmp_path / "damaged.rlx"
    content = bytearray(files.rlx.read_bytes())
    content[-10] ^= 0xFF  # inside the last blob: a checksum fails
    damaged.write_bytes(bytes(content))
    assert cli("inspect", damaged).code == 1
    truncated = tmp_path / "truncated.rlx"
    truncated.write_bytes(files.rlx.read_bytes()[:40])
    assert cli("inspect", truncated).code == 3


# --- files that are not artifacts ---------------------------------------------------------


def _gguf(path):
    writer = gguf.GGUFWriter(str(path), "test")
    writer.add_tensor("w", np.ones((4, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("kind", ["onnx", "safetensors", "gguf", "npz"])
@pytest.mark.parametrize("command", ["inspect", "run", "tensors"])
def test_hint_when_the_file_is_not_an_artifact(cli, files, tmp_path, kind, command):
    path = tmp_path / f"model.{kind}"
    if kind == "onnx":
        path.write_bytes(files.onnx.read_bytes())
    elif kind == "safetensors":
        save_file(files.weights, path)
    elif kind == "gguf":
        _gguf(path)
    else:
        np.savez(path, **files.weights)
    extra = {"inspect": [], "run": ["--input", f"x={files.x_npy}"],
             "tensors": ["-o", tmp_path / "out.npz"]}[command]
    expected = {"onnx": r"an ONNX model, not an \.rlx artifact: bake it first \(rlx-bake bake",
                "safetensors": "a safetensors file, not an .rlx artifact: weights go to",
                "gguf": "a GGUF file, not an .rlx artifact",
                "npz": r"a zip archive \(an \.npz\?\)"}[kind]
    assert_error(cli(command, path, *extra), rf"bad magic.*{expected}")


def test_every_command_documents_the_exit_codes(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for line in ("0  success", "1  a check failed", "2  bad usage", "3  an error"):
        assert line in text


def test_bake_knows_what_it_was_given(cli, files, tmp_path):
    """An artifact or a weights file given as the model gets a one-line hint; an ONNX model
    under another name is read as ONNX (the bytes say what it is)."""
    weights = tmp_path / "w.safetensors"
    save_file(files.weights, weights)
    assert_error(cli("bake", files.rlx, "-o", tmp_path / "a.rlx"),
                 r"is an \.rlx artifact already: inspect, run or verify it")
    assert_error(cli("bake", files.encrypted, "-o", tmp_path / "a.rlx"),
                 r"is an encrypted \.rlx artifact already")
    assert_error(cli("bake", weights, "-o", tmp_path / "a.rlx"),
                 r"is a safetensors file, not a model: .* with --weights")
    renamed = tmp_path / "model.bin"
    renamed.write_bytes(files.onnx.read_bytes())
    result = cli("bake", renamed, "-o", tmp_path / "b.rlx", "--json")
    assert result.code == 0 and result.json()["computing_nodes"]["onnx"] == 5


@pytest.mark.parametrize("command", ["bake", "inspect", "tensors", "run", "verify",
                                     "relayout", "encrypt", "decrypt", "demo"])
def test_every_command_help_names_the_exit_codes(capsys, command):
    assert main([command, "--help"]) == 0
    assert "exit codes: 0 success, 1 a check failed, 2 bad usage, 3 an error" in \
        capsys.readouterr().out


@pytest.mark.parametrize(("command", "extra"), [
    ("bake", []), ("import-onnx", []), ("export", []), ("tensors", []), ("convert", []),
    ("relayout", ["--memory", "runtime"]), ("encrypt", ["--password", "pw"]),
    ("decrypt", ["--password", "pw"]),
])
@pytest.mark.parametrize("spelling", ["same", "resolved", "hard link"])
def test_an_output_that_is_the_input_is_refused(cli, files, tmp_path, command, extra,
                                                spelling):
    """The same file, named as given, through `..`, or by a hard link: a usage error (2)
    before anything is read or written, and the input left as it was."""
    source = tmp_path / ("m.onnx" if command in ("bake", "import-onnx") else "m.rlx")
    original = (files.onnx if source.suffix == ".onnx" else files.rlx).read_bytes()
    source.write_bytes(original)
    output = {"same": source, "resolved": tmp_path / "sub" / ".." / source.name,
              "hard link": tmp_path / f"link{source.suffix}"}[spelling]
    (tmp_path / "sub").mkdir()
    if spelling == "hard link":
        output.hardlink_to(source)
    assert_error(cli(command, source, "-o", output, *extra),
                 f"the output .* is the input .*: write to another file .*'rlx-bake {command} "
                 "--help'", code=2)
    assert source.read_bytes() == original


def test_bake_refuses_to_write_over_its_weights(cli, files, tmp_path):
    weights = tmp_path / "w.npz"
    weights.write_bytes(files.npz.read_bytes())
    assert_error(cli("bake", files.graph_json, "-w", weights, "-o", weights), "is the input",
                 code=2)
    assert weights.read_bytes() == files.npz.read_bytes()


def _gemm_model(b: np.ndarray, c: np.ndarray) -> onnx.ModelProto:
    """y = Gemm(x, B, C, transB=1): the bake folds B's transpose into a weight of its own."""
    node = helper.make_node("Gemm", ["x", "B", "C"], ["y"], transB=1, name="/fc/Gemm")
    graph = helper.make_graph(
        [node], "fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 40])],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(c, "C")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_folded_weight_written_by_tensors_names_its_param_when_baked_again(cli, tmp_path):
    """tensors -> bake --weights: a weight the bake folded (Gemm's B transposed) comes out
    under a made-up name; baking with it says which param it is, transposed (a warning
    when other tensors match, the error when none does), and bound under that name, in
    that layout, it is what runs (checked against onnxruntime)."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    b, c = (rng.standard_normal(s).astype(np.float32) for s in ((40, 48), (40,)))
    src, baked, written = tmp_path / "fc.onnx", tmp_path / "fc.rlx", tmp_path / "w.safetensors"
    onnx.save(_gemm_model(b, c), src)
    assert cli("bake", src, "-o", baked).code == 0
    assert cli("tensors", baked, "-o", written).code == 0
    [folded] = [n for n in load_file(written) if n not in ("B", "C")]
    assert "C" in load_file(written)  # the bias, under its own name: it matches
    again = cli("bake", src, "--weights", written, "-o", tmp_path / "again.rlx", "--json")
    assert again.json()["report"]["unused_bindings_likely"] == {folded: "param 'B' transposed"}
    assert f"{folded} (likely param 'B' transposed)" in again.err
    alone = tmp_path / "alone.safetensors"
    assert cli("tensors", baked, "-o", alone, "--names", folded).code == 0
    assert_error(cli("bake", src, "--weights", alone, "-o", tmp_path / "no.rlx"),
                 rf"matches none of the graph's params .*; {folded} is likely param 'B' "
                 r"transposed\)$")
    new = rng.standard_normal((48, 40)).astype(np.float32)  # the folded layout: B.T
    save_file({"B": np.ascontiguousarray(new.T)}, tmp_path / "fixed.safetensors")
    fixed = tmp_path / "fixed.rlx"
    assert cli("bake", src, "--weights", tmp_path / "fixed.safetensors", "-o", fixed).code == 0
    x = rng.standard_normal((2, 48)).astype(np.float32)
    want = ort.InferenceSession(_gemm_model(new.T.copy(), c).SerializeToString()).run(
        None, {"x": x})[0]
    np.testing.assert_allclose(run_file(fixed, x), want, rtol=1e-5, atol=1e-5)
