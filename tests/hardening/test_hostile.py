"""Hostile inputs, crafted on purpose: each is refused with a typed error, quickly, before
any large allocation (the tracemalloc peak stays small, numpy buffers included).

The cases follow the loader CVEs of the peer systems (reference/peers.md): ONNX external
data escaping the model folder (CVE-2022-25882, CVE-2024-27318, the symlink variant),
sizes that disagree or overflow (the GGUF and ExecuTorch CVEs), recursion bombs, and
costs a header may demand of its reader (the Argon2 parameters, the chunk count).
"""

from __future__ import annotations

import io
import json
import struct
import time
import tracemalloc
import zipfile

import gguf
import numpy as np
import pytest
from argon2 import low_level as argon2_ll
from onnx import TensorProto, helper

from rlx.artifact import crypto, parse_rlx, read_rlx
from rlx.errors import ArtifactError, ModelImportError, WeightError
from rlx.onnx import import_onnx
from rlx.weights import load_weights
from tests.hardening import mutate, seeds
from tests.hardening.budgets import FAST, SMALL, refused


# -- ONNX ----------------------------------------------------------------------------------
@pytest.fixture
def folder(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    seeds.prepare_onnx_folder(model_dir)
    (tmp_path / "secret.bin").write_bytes(np.arange(64, dtype=np.float32).tobytes())
    (model_dir / "sub").mkdir()
    return model_dir


def matmul_model(weight: TensorProto, x_dims=(2, 4)) -> bytes:
    return one_node(helper.make_node("MatMul", ["x", "w"], ["y"]), list(x_dims), None,
                    [weight])


def one_node(node, x_dims, y_dims, initializers=()) -> bytes:
    """A model of one node from input `x` to output `y` (float)."""
    return seeds.onnx_model([node], [seeds.value_info("x", x_dims)],
                            [seeds.value_info("y", y_dims)], initializers)


def external_weight(location: str, dims=(4, 4), **entries: str) -> TensorProto:
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims),
                         data_location=TensorProto.EXTERNAL)
    for key, value in {"location": location, **entries}.items():
        tensor.external_data.add(key=key, value=value)
    return tensor


@pytest.mark.parametrize("location, message", [
    ("/etc/hostname", "absolute path"),
    ("../secret.bin", "'..'"),
    ("sub/../../secret.bin", "'..'"),  # CVE-2024-27318: a nested climb out
    ("..\\secret.bin", "'..'"),
    ("C:\\Windows\\win.ini", "absolute path"),
    ("link.bin", "symbolic link"),  # a symlink that leaves the folder
])
def test_external_data_may_not_leave_the_model_folder(folder, location, message):
    path = folder / "model.onnx"
    path.write_bytes(matmul_model(external_weight(location)))
    refused(ModelImportError, lambda: import_onnx(path), match=message)


def test_external_data_inside_the_folder_still_loads(folder):
    path = folder / "model.onnx"
    path.write_bytes(matmul_model(external_weight("weights.bin", offset="64", length="64")))
    _, bindings = import_onnx(path)
    np.testing.assert_array_equal(bindings["w"].ravel(), np.arange(16, 32, dtype=np.float32))


@pytest.mark.parametrize("entries, message", [
    ({"length": "60"}, "length is 60 bytes"),
    ({"offset": "200"}, "runs past the end"),
    ({"offset": str(2**62)}, "runs past the end"),
    ({"offset": "-64"}, None),
    ({"offset": "sixty"}, "not integers"),
])
def test_external_data_that_disagrees_with_its_tensor(folder, entries, message):
    path = folder / "model.onnx"
    path.write_bytes(matmul_model(external_weight("weights.bin", **entries)))
    refused(ModelImportError, lambda: import_onnx(path), match=message)


def inline(dims, raw: bytes = b"", floats=()) -> TensorProto:
    return TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims), raw_data=raw,
                       float_data=list(floats))


@pytest.mark.parametrize("tensor", [
    inline((4, 4), raw=bytes(60)),  # short raw data
    inline((4, 4), raw=bytes(68)),  # long raw data
    inline((4, 4), floats=[1.0] * 15),  # too few values
    inline((2**32, 2**32, 2**32)),  # numel overflows int64, no data
    inline((2**62, 4), raw=bytes(64)),  # nbytes overflows int64
    inline((2**31, 2**31), raw=bytes(64)),
])
def test_initializer_sizes_that_lie(tmp_path, tensor):
    path = tmp_path / "model.onnx"
    path.write_bytes(matmul_model(tensor))
    refused(ModelImportError, lambda: import_onnx(path))


@pytest.mark.parametrize("dims", [(2**40, 4), (2**62, 2**62, 2**62)])
def test_external_dims_whose_size_overflows(folder, dims):
    path = folder / "model.onnx"
    path.write_bytes(matmul_model(external_weight("weights.bin", dims=dims)))
    refused(ModelImportError, lambda: import_onnx(path))


def test_a_constant_attribute_declaring_a_huge_tensor(tmp_path):
    value = TensorProto(name="v", data_type=TensorProto.FLOAT, dims=[2**40, 2**40])
    model = seeds.onnx_model([helper.make_node("Constant", [], ["c"], value=value),
                              helper.make_node("Add", ["x", "c"], ["y"])],
                             [seeds.value_info("x", [1])], [seeds.value_info("y", None)])
    refused(ModelImportError, lambda: import_onnx(model))


def test_graph_input_dims_that_overflow_are_declarations_not_allocations():
    model = one_node(helper.make_node("Relu", ["x"], ["y"]), [2**62, 2**62], None)
    started = time.process_time()
    try:
        graph, _ = import_onnx(model)
    except ModelImportError:
        return  # refusing is as good
    assert time.process_time() - started < FAST and len(graph) == 2


def test_a_cycle_is_refused():
    model = seeds.onnx_model([helper.make_node("Relu", ["b"], ["a"]),
                              helper.make_node("Relu", ["a"], ["b"]),
                              helper.make_node("Add", ["x", "b"], ["y"])],
                             [seeds.value_info("x", [2])], [seeds.value_info("y", [2])])
    refused(ModelImportError, lambda: import_onnx(model), match="cycle|undefined|order")


def test_an_undefined_input_is_refused():
    model = one_node(helper.make_node("Add", ["x", "nowhere"], ["y"]), [2], [2])
    refused(ModelImportError, lambda: import_onnx(model), match="nowhere")


def test_a_function_that_calls_itself_is_refused():
    loop = helper.make_function("local", "Forever", ["a"], ["b"],
                                [helper.make_node("Forever", ["a"], ["b"], domain="local")],
                                [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])
    model = seeds.onnx_model([helper.make_node("Forever", ["x"], ["y"], domain="local")],
                             [seeds.value_info("x", [2])], [seeds.value_info("y", [2])],
                             opset=18, functions=[loop])
    refused(ModelImportError, lambda: import_onnx(model), budget=8 * SMALL)


def _nested_bytes(depth: int) -> bytes:
    """ModelProto.graph.node.attribute.g.node.attribute.g... `depth` times, on the wire."""
    def field(number: int, body: bytes) -> bytes:
        tag, size = (number << 3) | 2, len(body)
        varint = bytearray()
        while True:
            varint.append((size & 0x7F) | (0x80 if size > 0x7F else 0))
            size >>= 7
            if not size:
                break
        return bytes([tag]) + bytes(varint) + body

    graph = b""
    for _ in range(depth):
        attribute = field(1, b"then_branch") + field(6, graph)  # AttributeProto.name, .g
        graph = field(1, field(4, b"If") + field(5, attribute))  # GraphProto.node
    return b"\x08\x08" + field(7, graph)  # ModelProto.ir_version, .graph


@pytest.mark.parametrize("depth", [200, 5000])
def test_a_subgraph_recursion_bomb_is_refused(tmp_path, depth):
    path = tmp_path / "bomb.onnx"
    path.write_bytes(_nested_bytes(depth))
    refused(ModelImportError, lambda: import_onnx(path), budget=8 * SMALL)


def test_the_deepest_nesting_protobuf_allows_imports_in_bounded_time():
    from onnx import ModelProto

    model = mutate.nest_subgraphs(ModelProto.FromString(seeds.onnx_models()["mlp"]), 30)
    started = time.process_time()
    graph, _ = import_onnx(model.SerializeToString())
    assert time.process_time() - started < 2 * FAST and len(graph) > 30


# -- artifacts -----------------------------------------------------------------------------
@pytest.fixture
def no_argon2(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("argon2 ran for a file that should have been refused")
    monkeypatch.setattr(argon2_ll, "hash_secret_raw", refuse)


ENCRYPTED = seeds.encrypted_artifacts()["gather.plain-header.enc"]  # 2 chunks


@pytest.mark.parametrize("offset, width, value, message", [
    (16, 4, 1 << 30, "m_cost = 1073741824 exceeds"),  # 1 TiB of Argon2 memory
    (16, 4, 2**32 - 1, "m_cost"),  # 4 TiB
    (20, 4, 2**32 - 1, "t_cost"),
    (24, 4, 2**24, "p_cost"),
    (44, 4, 2048, "truncated or extended"),  # a valid chunk size, wrong for this file
    (48, 8, 2**63, "chunks, more than|truncated or extended"),  # 2**53 chunks of 1 KiB
    (48, 8, 2**64 - 1, "chunks, more than|truncated or extended"),
    (44, 4, 0, "chunk_size = 0"),
])
def test_encrypted_headers_demanding_too_much(tmp_path, no_argon2, offset, width, value,
                                              message):
    path = tmp_path / "hostile.bin"
    path.write_bytes(mutate.set_field(ENCRYPTED, offset, width, value))
    refused(ArtifactError, lambda: read_rlx(path, password=seeds.PASSWORD), match=message)
    refused(ArtifactError, lambda: crypto.read_encryption_info(path), match=message)


def test_a_huge_chunk_count_with_a_matching_file_size_is_refused(no_argon2):
    """A header whose length and file size agree on 2**32 + 1 chunks (we only claim the
    size: the check must come before anything reads that far)."""
    header = struct.pack("<8sIIIII16sIQ7s", crypto.ENC_MAGIC, 2, 1, 64, 1, 1, bytes(16),
                         1024, 1024 * 2**32 + 1, bytes(7))
    refused(ArtifactError, lambda: crypto._parse_header(header, 0, crypto.KdfLimits(), "x"),
            match="more than the 4294967296")


PLAIN = seeds.artifacts()["mlp-exact-duplex"]


def edited(mutation) -> bytes:
    header, body = mutate.split_rlx(PLAIN)
    mutation(header)
    return mutate.build_rlx(json.dumps(header).encode(), body)


@pytest.mark.parametrize("mutation", [
    lambda h: h["blobs"][0].update(length=2**62),
    lambda h: h["blobs"][0].update(offset=2**63),
    lambda h: h["graph"]["nodes"][1]["shape"].update(dims=[2**31] * 8),
    lambda h: h["weights"][0].update(shape=[2**62, 2**62, 2**62]),
    lambda h: h["weights"][0].update(shape=[0] * 100),
    lambda h: h["graph"]["nodes"][0]["shape"].update(dims=[1] * 100),
    lambda h: h.update(blobs=[{"offset": 64 * i, "length": 0, "xxh3": ""}
                              for i in range(100_000)]),
    lambda h: h["graph"].update(nodes=h["graph"]["nodes"] * 2000),
])
def test_artifact_headers_that_lie_about_sizes(mutation):
    """The last two make multi-MB headers: their CPU time and memory grow with their size
    (at most 2 us of CPU per byte here, under tracemalloc)."""
    data = edited(mutation)
    refused(ArtifactError, lambda: parse_rlx(data, verify="none"),
            budget=SMALL + 64 * len(data), seconds=FAST + len(data) * 2e-6)


def test_a_header_length_beyond_the_cap_is_refused_unread():
    data = bytearray(PLAIN)
    struct.pack_into("<Q", data, 16, (64 << 20) + 1)
    refused(ArtifactError, lambda: parse_rlx(bytes(data)), match="cap")


def test_json_nested_a_million_levels_deep():
    text = b"[" * 1_000_000 + b"]" * 1_000_000
    data = mutate.build_rlx(text, b"")
    refused(ArtifactError, lambda: parse_rlx(data), budget=SMALL + 64 * len(data))


# -- weight files --------------------------------------------------------------------------
def gguf_bytes(kv: bytes, n_kv: int = 1, tensors: bytes = b"", n_tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kv + tensors


def gguf_key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


ARRAY, STRING, U8 = 9, 8, 0


@pytest.mark.parametrize("data, message", [
    (gguf_bytes(gguf_key("a") + struct.pack("<IIQ", ARRAY, STRING, 2**60)), "does not fit"),
    (gguf_bytes(gguf_key("a") + struct.pack("<IIQ", ARRAY, U8, 2**62)), "needs"),
    (gguf_bytes(gguf_key("a") + struct.pack("<I", ARRAY) + struct.pack("<IQ", ARRAY, 1) * 5000
                + struct.pack("<IQ", U8, 0)), "nest deeper"),
    (gguf_bytes(gguf_key("a") + struct.pack("<I", 99)), "unknown metadata value type"),
    (gguf_bytes(b"", 0, gguf_key("t") + struct.pack("<I4QIQ", 4, *[2**32] * 4, 0, 0), 1),
     "more than an array can hold"),
    (gguf_bytes(b"", 0, gguf_key("t") + struct.pack("<I2QIQ", 2, 31, 1, 8, 0), 1),
     "not whole blocks"),
    (gguf_bytes(b"", 0, gguf_key("t") + struct.pack("<I", 2**31), 2**40), "dims"),
    (gguf_bytes(b"", 2**63), "needs 8 bytes"),
])
def test_gguf_counts_that_lie(tmp_path, data, message):
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    refused(WeightError, lambda: load_weights(path), match=message)


def test_gguf_metadata_arrays_cost_no_memory_per_element(tmp_path):
    """The gguf package's reader spends ~700 bytes and 50 us per array element; rlx's
    parser steps over a million-element array without building anything."""
    path = tmp_path / "big.gguf"
    w = gguf.GGUFWriter(str(path), "x")
    w.add_key_value("big", [0] * 1_000_000, gguf.GGUFValueType.ARRAY,
                    sub_type=gguf.GGUFValueType.UINT8)
    w.add_tensor("t", np.ones(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tracemalloc.start()
    start = time.process_time()
    bundle = load_weights(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.process_time() - start < FAST and peak < SMALL
    np.testing.assert_array_equal(bundle.tensors["t"], np.ones(4, np.float32))


def safetensors_bytes(header: dict, data: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


@pytest.mark.parametrize("header, data", [
    ({"w": {"dtype": "F32", "shape": [2**62, 2**62], "data_offsets": [0, 16]}}, bytes(16)),
    ({"w": {"dtype": "F32", "shape": [2**31, 2**31], "data_offsets": [0, 2**64]}}, b""),
    ({"w": {"dtype": "F32", "shape": [0] * 100, "data_offsets": [0, 0]}}, b""),
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
      "v": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, bytes(24)),
])
def test_safetensors_sizes_that_lie(tmp_path, header, data):
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(safetensors_bytes(header, data))
    refused(WeightError, lambda: load_weights(path))


def npz_with(member: bytes, name: str = "w.npy", method=zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        archive.writestr(name, member)
    return buffer.getvalue()


def npy_header(shape: tuple, descr: str = "<f4") -> bytes:
    text = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


@pytest.mark.parametrize("member", [
    npy_header((2**40,)) + bytes(64),  # numpy would reserve 4 TiB before reading
    npy_header((2**62, 2**62)) + bytes(64),
    npy_header((1 << 28,)) + bytes(64),  # 1 GiB: allocatable, still refused
    npy_header((4,), descr="|O") + bytes(64),  # pickled objects
    b"not an npy member at all",
])
def test_npz_members_that_lie_about_their_size(tmp_path, member):
    path = tmp_path / "hostile.npz"
    path.write_bytes(npz_with(member))
    refused(WeightError, lambda: load_weights(path))


def test_a_deflate_bomb_is_bounded_by_the_deflate_ratio(tmp_path):
    """10 MiB of zeros deflate to ~10 KiB: legal, and loading costs what it inflates to."""
    path = tmp_path / "bomb.npz"
    zeros = np.zeros(10 << 18, np.float32)
    member = npy_header(zeros.shape) + zeros.tobytes()
    path.write_bytes(npz_with(member, method=zipfile.ZIP_DEFLATED))
    size = path.stat().st_size
    tracemalloc.start()
    load_weights(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1100 * size + SMALL  # the npz target's budget (harness.TARGETS)


def test_a_zip_claiming_more_than_deflate_can_give_is_refused(tmp_path):
    data = bytearray(npz_with(npy_header((4,)) + bytes(16)))
    # the central directory's uncompressed size (offset 24 in the entry) now claims 1 GiB
    entry = data.rfind(b"PK\x01\x02")
    struct.pack_into("<I", data, entry + 24, 1 << 30)
    path = tmp_path / "claim.npz"
    path.write_bytes(bytes(data))
    refused(WeightError, lambda: load_weights(path), match="claims")


@pytest.mark.parametrize("version, width", [((1, 0), 2), ((2, 0), 4), ((3, 0), 4)])
def test_an_npy_header_length_numpy_would_read_in_full(tmp_path, version, width):
    """numpy reads the declared header (up to 4 GiB) before checking its 10,000-byte cap."""
    path = tmp_path / "hostile.npy"
    length = 2**(8 * width) - 1
    path.write_bytes(b"\x93NUMPY" + bytes(version) + length.to_bytes(width, "little") + b"{")
    refused(WeightError, lambda: load_weights(path), match="header of")


def test_an_encrypted_npz_member_is_refused(tmp_path):
    data = bytearray(npz_with(npy_header((4,)) + bytes(16)))
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        struct.pack_into("<H", data, at + flags_at, 1)  # general purpose flag: encrypted
    path = tmp_path / "locked.npz"
    path.write_bytes(bytes(data))
    refused(WeightError, lambda: load_weights(path), match="encrypted")


def test_an_empty_tensor_of_a_type_only_the_gguf_package_decodes(tmp_path):
    """TQ1_0 with a zero dim: no blocks, which the package's dequantizer cannot reshape."""
    info = gguf_key("t") + struct.pack("<I2QIQ", 2, 256, 0, int(gguf.GGMLQuantizationType.TQ1_0),
                                       0)
    path = tmp_path / "empty.gguf"
    data = gguf_bytes(b"", 0, info, 1)
    path.write_bytes(data + bytes(-len(data) % 32))  # up to the aligned data section
    assert load_weights(path).tensors["t"].shape == (0, 256)
    refused(WeightError, lambda: load_weights(path, "packed"), match="cannot be kept packed")
