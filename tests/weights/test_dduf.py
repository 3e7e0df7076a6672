"""DDUF bundles written by `huggingface_hub.export_folder_as_dduf`, read by rlx and checked
against `huggingface_hub.read_dduf_file` + the `safetensors` package; the policy keeps
native f16/bf16 under NO-GO (the reference's auto rule for DDUF) and widens them under GO;
malformed bundles are refused with WeightError."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save_file

from rlx import bake_bundle
from rlx.errors import WeightError
from rlx.ir import Graph, Shape
from rlx.runtime import Session
from rlx.weights import load_weights
from rlx.weights.dduf import read_dduf

hub = pytest.importorskip("huggingface_hub")


def pipeline_folder(tmp: Path, clash: bool = True) -> Path:
    rng = np.random.default_rng(0)
    folder = tmp / "pipe"
    (folder / "unet").mkdir(parents=True)
    (folder / "text_encoder").mkdir()
    (folder / "model_index.json").write_text(json.dumps(
        {"_class_name": "ToyPipeline", "unet": ["diffusers", "UNet2DModel"],
         "text_encoder": ["transformers", "CLIPTextModel"]}))
    (folder / "unet" / "config.json").write_text("{}")
    (folder / "text_encoder" / "config.json").write_text("{}")
    save_file({"conv_in.weight": rng.standard_normal((4, 3)).astype(np.float16),
               "proj": rng.standard_normal((3, 5)).astype(np.float16)},
              str(folder / "unet" / "diffusion_pytorch_model.safetensors"))
    save_file({("conv_in.weight" if clash else "embed"): rng.standard_normal((2, 2)).astype(
        ml_dtypes.bfloat16), "ids": np.arange(4, dtype=np.int64),
        "scale": np.float32([0.5, 2.0])},
        str(folder / "text_encoder" / "model.safetensors"))
    return folder


def dduf(tmp: Path, clash: bool = True) -> Path:
    path = tmp / "pipe.dduf"
    hub.export_folder_as_dduf(str(path), str(pipeline_folder(tmp, clash)))
    return path


_DTYPES = {"F16": np.float16, "F32": np.float32, "I64": np.int64, "BF16": ml_dtypes.bfloat16}


def oracle(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """Tensors per member: members found by huggingface_hub, tensors by the safetensors
    package (which has no numpy bfloat16: those by the format's own description)."""
    out = {}
    for name, entry in hub.read_dduf_file(path).items():
        if name.endswith(".safetensors"):
            with entry.as_mmap() as mapped:
                raw = bytes(mapped)
            (n,) = struct.unpack_from("<Q", raw)
            header = json.loads(raw[8:8 + n])
            plain = {k for k, v in header.items() if k != "__metadata__" and v["dtype"] != "BF16"}
            tensors = {k: v for k, v in load_safetensors(raw).items()} if plain == {
                k for k in header if k != "__metadata__"} else {}
            for key, value in header.items():
                if key == "__metadata__" or key in tensors:
                    continue
                begin, end = value["data_offsets"]
                tensors[key] = np.frombuffer(raw[8 + n + begin:8 + n + end],
                                             _DTYPES[value["dtype"]]).reshape(value["shape"])
            out[name] = tensors
    return out


def test_tensors_match_huggingface_hub_and_safetensors(tmp_path):
    path = dduf(tmp_path)
    ours = read_dduf(path).dense
    expected = {f"{member.split('/')[0]}/{k}": v
                for member, tensors in oracle(path).items() for k, v in tensors.items()}
    assert sorted(ours) == sorted(expected)  # names clash: every tensor <component>/<name>
    for name, value in expected.items():
        assert ours[name].dtype == value.dtype and ours[name].shape == value.shape
        assert ours[name].tobytes() == value.tobytes()
        assert not ours[name].flags.writeable  # a view of the map, not a copy


def test_unique_names_stay_as_they_are(tmp_path):
    ours = read_dduf(dduf(tmp_path, clash=False)).dense
    assert {"conv_in.weight", "proj", "embed", "ids", "scale"} == set(ours)


def test_policy_keeps_native_half_under_no_go_and_widens_under_go(tmp_path):
    path = dduf(tmp_path, clash=False)
    auto = load_weights(path, "auto")
    assert not auto.verdict.go and "DDUF" in auto.verdict.reason
    assert auto.tensors["proj"].dtype == np.float16
    assert auto.tensors["embed"].dtype == ml_dtypes.bfloat16
    assert not load_weights(path, "packed").verdict.go
    dense = load_weights(path, "f32")
    assert dense.verdict.go
    assert dense.tensors["proj"].dtype == np.float32 and dense.tensors["ids"].dtype == np.int64
    np.testing.assert_array_equal(dense.tensors["proj"], auto.tensors["proj"].astype(np.float32))


def test_a_dduf_bakes_and_runs(tmp_path):
    path = dduf(tmp_path, clash=False)
    g = Graph("toy")
    x = g.input("x", Shape((2, 3)))
    g.set_outputs([g.matmul(x, g.param("proj", Shape((3, 5))))])
    for policy in ("auto", "f32"):
        bundle = load_weights(path, policy)
        file, report = bake_bundle(g, bundle)
        x_value = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
        graph = file.into_runtime_graph()
        out = Session().compile(graph).run({"x": x_value})[0]
        proj = oracle(path)["unet/diffusion_pytorch_model.safetensors"]["proj"]
        np.testing.assert_allclose(out, x_value.astype(np.float64) @ proj.astype(np.float64),
                                   rtol=1e-3, atol=1e-3)


def rezip(path: Path, edit) -> None:
    with zipfile.ZipFile(path) as archive:
        members = [(i, archive.read(i.filename)) for i in archive.infolist()]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for info, data in edit(members):
            archive.writestr(info if isinstance(info, str) else info.filename, data,
                             getattr(info, "compress_type", zipfile.ZIP_STORED))
    path.write_bytes(buffer.getvalue())


def test_malformed_bundles_are_refused(tmp_path):
    path = dduf(tmp_path)
    good = path.read_bytes()

    def deflate(members):
        for info, data in members:
            info.compress_type = zipfile.ZIP_DEFLATED
            yield info, data

    cases = [
        (deflate, "compressed"),
        (lambda m: [*m, ("a/b/c.json", b"{}")], "one level of folders"),
        (lambda m: [*m, ("notes.bin", b"x")], "file type not allowed"),
        (lambda m: [(i, d) for i, d in m if i.filename != "model_index.json"],
         "no model_index.json"),
        (lambda m: [*m, ("vae/config.json", b"{}")], "not in model_index.json"),
        (lambda m: [(i, d[:20] if i.filename.endswith(".safetensors") else d) for i, d in m],
         "safetensors"),
        (lambda m: [*m, ("../x.json", b"{}")], "safe relative path"),
    ]
    for edit, message in cases:
        path.write_bytes(good)
        rezip(path, edit)
        with pytest.raises(WeightError, match=message):
            load_weights(path, "auto")
    path.write_bytes(good[:len(good) // 2])
    with pytest.raises(WeightError, match="not a valid zip"):
        load_weights(path)


def test_a_member_whose_data_overlaps_another_is_refused(tmp_path):
    """Two directory entries whose data ranges overlap (the second's local header inside
    the first's data): zipfile reads both happily; rlx refuses the archive."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("model_index.json", b"{}")
    inner_bytes = inner.getvalue()
    # the local header and data of model_index.json, as they sit in `inner`
    local = inner_bytes[:zipfile.ZipFile(inner).infolist()[0].compress_size + 30 + 16]
    outer = io.BytesIO()
    with zipfile.ZipFile(outer, "w") as archive:
        archive.writestr("wrapper.txt", local)
        start = archive.infolist()[0].header_offset + 30 + len("wrapper.txt")
        info = zipfile.ZipInfo("model_index.json")
        archive.writestr(info, b"{}")
    data = bytearray(outer.getvalue())
    # point the second directory entry at the copy inside wrapper.txt's data
    cd = data.rindex(b"PK\x01\x02")
    struct.pack_into("<I", data, cd + 42, start)
    path = tmp_path / "overlap.dduf"
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as archive:
        assert archive.read("model_index.json") == b"{}"
    with pytest.raises(WeightError, match="overlap"):
        read_dduf(path)
