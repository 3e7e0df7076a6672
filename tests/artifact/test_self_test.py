"""The self-test section of an `.rlx` file (docs/format.md, "Self-test"): what the bake
stores (against a float64 forward of the model), the cap, the format's checks, tampering
refused by the checksum and the signature, and a load that never touches the section."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rlx import BakeOptions, MemoryMode, bake, read_rlx, write_rlx
from rlx.artifact.header import read_header
from rlx.artifact.self_test import SelfTest, SelfTestSection
from rlx.baking import self_test as baking_self_test
from rlx.errors import ArtifactError, IntegrityError, SignatureError
from tests.baking.models import mlp_forward, mlp_graph, mlp_weights

WEIGHTS = mlp_weights()


def _feeds(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((32, 784)).astype(np.float32)}


def _baked(profile: str = "exact", **options):
    opts = BakeOptions.from_profile(profile).replace(**options)
    return bake(mlp_graph(), WEIGHTS, opts)[0]


def _section_range(path) -> tuple[int, int]:
    """(start, end) of the self-test blob in the file, from its header."""
    data = path.read_bytes()
    header = read_header(memoryview(data), str(path), _raise)
    blob = header.body["self_test"]["blob"]
    offsets = [b["offset"] for b in header.body["blobs"]]
    start = -(-(40 + header.length) // 64) * 64 + offsets[blob]
    return start, start + header.body["self_test"]["bytes"]


def _raise(message, error=ArtifactError):
    raise error(message)


@pytest.mark.parametrize("profile", ["merge", "fold", "exact", "size"])
def test_stores_the_feeds_and_the_models_outputs_with_measured_tolerances(tmp_path, profile):
    feeds = [_feeds(1), _feeds(2)]
    path = tmp_path / "m.rlx"
    write_rlx(path, _baked(profile, self_test=feeds))
    section = read_rlx(path).self_test
    assert isinstance(section, SelfTestSection) and section.samples == 2
    test = section.load()
    assert [t.name for t in test.tolerances] == ["logits"]
    for stored, given in zip(test.inputs, feeds, strict=True):
        np.testing.assert_array_equal(stored["x"], given["x"])
    (tol,) = test.tolerances
    for given, (out,) in zip(feeds, test.outputs, strict=True):
        expected = mlp_forward(given["x"], WEIGHTS)  # the model, in float64
        scale = np.abs(expected).max()
        np.testing.assert_allclose(out, expected, atol=1e-5 * scale)
    assert tol.allowance == pytest.approx(
        baking_self_test.ENGINE_ALLOWANCE * max(np.abs(o[0]).max() for o in test.outputs))
    if profile != "size":  # lossless (ternary TQ2_0 packing too): the baked graph is exact
        assert tol.deviation < 1e-5 * scale
    else:  # Q8_0 on w2: the baked graph's own error, measured independently here
        baked_out = [mlp_forward(f["x"], _dequantized()) for f in feeds]
        gap = max(np.abs(b - o[0]).max() for b, o in zip(baked_out, test.outputs, strict=True))
        assert tol.deviation == pytest.approx(gap, rel=1e-3, abs=1e-5)
        assert tol.deviation > 1e-4
    assert tol.atol == pytest.approx(tol.deviation + tol.allowance)


def _dequantized() -> dict[str, np.ndarray]:
    """The MLP's weights as the size profile stores them: w2 through Q8_0 (the gguf package
    as the reference codec), b1 through f16, the rest as is (w1 is exactly ternary)."""
    gguf = pytest.importorskip("gguf")
    w2 = WEIGHTS["w2"]
    codes = gguf.quants.quantize(np.ascontiguousarray(w2.T), gguf.GGMLQuantizationType.Q8_0)
    back = gguf.quants.dequantize(codes, gguf.GGMLQuantizationType.Q8_0).reshape(w2.T.shape).T
    return {**WEIGHTS, "w2": back.astype(np.float32),
            "b1": WEIGHTS["b1"].astype(np.float16).astype(np.float32)}


def test_seeded_sample_of_the_declared_shapes_with_symbolic_dims_at_one(tmp_path):
    path = tmp_path / "m.rlx"
    write_rlx(path, bake(mlp_graph(batch="batch"), WEIGHTS,
                         BakeOptions(self_test=True))[0])
    test = read_rlx(path).self_test.load()
    assert test.samples == 1 and test.inputs[0]["x"].shape == (1, 784)
    assert "seeded" in test.note and "batch=1" in test.note
    np.testing.assert_allclose(test.outputs[0][0], mlp_forward(test.inputs[0]["x"], WEIGHTS),
                               atol=1e-4)


def test_calibration_feeds_are_the_default_samples():
    calibration = [_feeds(3)]
    file = _baked("size", calibration=calibration, self_test=True)
    assert isinstance(file.self_test, SelfTest)
    np.testing.assert_array_equal(file.self_test.inputs[0]["x"], calibration[0]["x"])


def test_samples_over_the_cap_are_dropped_then_sliced(monkeypatch):
    monkeypatch.setattr(baking_self_test, "CAP_BYTES", 150_000)  # one 32x784 sample: ~100 KB
    kept = _baked(self_test=[_feeds(1), _feeds(2)]).self_test
    assert kept.samples == 1 and kept.note.startswith("1 of 2")
    monkeypatch.setattr(baking_self_test, "CAP_BYTES", 30_000)
    sliced = bake(mlp_graph(batch="batch"), WEIGHTS, BakeOptions(self_test=[_feeds(1)]))[0]
    test = sliced.self_test
    assert test.inputs[0]["x"].shape == (8, 784) and "batch=8" in test.note
    assert test.nbytes <= 30_000
    np.testing.assert_allclose(test.outputs[0][0], mlp_forward(_feeds(1)["x"][:8], WEIGHTS),
                               atol=1e-4)
    with pytest.raises(Exception, match="no symbolic dim is left to slice"):
        _baked(self_test=[_feeds(1)])  # batch 32 is static here


def test_files_without_the_section_read_as_before(tmp_path):
    path = tmp_path / "m.rlx"
    write_rlx(path, _baked())
    body = read_header(memoryview(path.read_bytes()), str(path), _raise).body
    assert "self_test" not in body and read_rlx(path).self_test is None


def test_a_rewrite_keeps_the_section(tmp_path):
    first, second = tmp_path / "a.rlx", tmp_path / "b.rlx"
    write_rlx(first, _baked(self_test=[_feeds(1)]))
    write_rlx(second, read_rlx(first))
    assert second.read_bytes() == first.read_bytes()
    duplex = read_rlx(first).relayout(MemoryMode.DUPLEX)
    assert duplex.self_test is not None and duplex.self_test.load().samples == 1


def test_a_flipped_byte_in_the_section_is_found_when_it_is_used(tmp_path):
    path = tmp_path / "m.rlx"
    write_rlx(path, _baked(self_test=[_feeds(1)]))
    start, end = _section_range(path)
    data = bytearray(path.read_bytes())
    data[(start + end) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    file = read_rlx(path, verify="full")  # the weights' checksums: the section is apart
    with pytest.raises(IntegrityError, match="self-test blob"):
        file.self_test.load()


def test_a_signature_covers_the_section(tmp_path):
    from rlx import generate_keypair, sign_artifact
    from rlx.artifact.open import open_artifact

    private = generate_keypair()
    public = private.public_key()
    path = tmp_path / "m.rlx"
    write_rlx(path, _baked(self_test=[_feeds(1)]))
    sign_artifact(path, private)
    assert open_artifact(path, trusted_keys=[public]).self_test.load().samples == 1
    start, _ = _section_range(path)
    data = bytearray(path.read_bytes())
    data[start + 100] ^= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(SignatureError) as caught:
        open_artifact(path, trusted_keys=[public])
    assert caught.value.reason == "mismatch"


def test_encrypted_files_carry_it(tmp_path):
    path = tmp_path / "m.rlx"
    write_rlx(path, _baked(self_test=[_feeds(1)]), password="pw")
    test = read_rlx(path, password="pw").self_test.load()
    np.testing.assert_array_equal(test.inputs[0]["x"], _feeds(1)["x"])


@pytest.mark.parametrize("change, match", [
    (lambda d: d.update(samples=0), "sample count"),
    (lambda d: d["tensors"][0].update(offset=3), "aligned"),
    (lambda d: d["tensors"][0].update(shape=[64, 784]), "past the self-test blob"),
    (lambda d: d["tensors"][1].update(name="nope"), "out of place"),
    (lambda d: d["outputs"][0].update(atol=-1), "atol"),
    (lambda d: d["tensors"][0].update(dtype="f99"), "unknown dtype"),
])
def test_a_malformed_description_is_refused_when_decoded(tmp_path, change, match):
    file = _baked(self_test=[_feeds(1)])
    path = tmp_path / "m.rlx"
    write_rlx(path, file)
    section = read_rlx(path).self_test
    description = json.loads(json.dumps(section.description))
    change(description)
    broken = SelfTestSection(description, section._view, section._digest, str(path))
    with pytest.raises(ArtifactError, match=match):
        broken.load()


_UNTOUCHED = textwrap.dedent("""
    import ctypes, mmap, sys
    import numpy as np
    from rlx.artifact.reader import read_mapped_rlx
    from rlx.engines.model import build_runner
    path, start, end, touch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
    page = mmap.PAGESIZE
    first, last = -(-(base + start) // page) * page, (base + end) // page * page
    assert last - first >= 8 * page, "the section spans too few whole pages to prove much"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(first, last - first, 0) == 0  # PROT_NONE: a touch is a SIGSEGV
    file = read_mapped_rlx(memoryview(mapped), path, verify="full")
    graph = file.into_runtime_graph()
    runner = build_runner("numpy", file, graph, None, threads=None, precision="exact")
    x = np.ones((32, 784), np.float32)
    (logits,) = runner.run({"x": x}, ["logits"])
    assert logits.shape == (32, 10) and file.self_test.samples == 1
    if touch == "yes":
        file.self_test.load()
    print("untouched")
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect via libc")
def test_opening_and_running_never_touch_the_section(tmp_path):
    """The section's pages are made inaccessible (PROT_NONE) before the reader sees the
    mapping: a full open (every other checksum checked) and a run must not fault; decoding
    the test, the control, must (SIGSEGV)."""
    path = tmp_path / "m.rlx"
    write_rlx(path, _baked(self_test=[_feeds(1)]))
    start, end = _section_range(path)

    def run(touch: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _UNTOUCHED, str(path), str(start),
                               str(end), touch], capture_output=True, text=True, timeout=120)

    done = run("no")
    assert done.returncode == 0 and "untouched" in done.stdout, done.stderr
    control = run("yes")
    assert control.returncode == -11, (control.returncode, control.stderr[-500:])
