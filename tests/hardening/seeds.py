"""Valid files the fuzzers start from: small artifacts, weight files and ONNX models.

Each seed is small (a few KiB) so that a mutated case is cheap to run, yet together they
reach every reader path: every memory mode, compressed and plain headers, packed encodings,
subgraphs, integer constants that steer kernels, symbolic dims, encrypted containers of
several chunks, every dtype the weight readers take, and GGUF metadata of every value type.
All are deterministic.
"""

from __future__ import annotations

import functools
import io
import json
import tempfile
import zipfile
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np
from gguf.quants import quantize
from safetensors.numpy import save as save_safetensors
from safetensors.numpy import save_file as save_safetensors_file

from rlx import BakeOptions, BakeProfile, MemoryMode, RlxFile, bake
from rlx.artifact import crypto
from rlx.artifact.writer import iter_rlx_bytes
from rlx.ir import Activation, BinaryOp, DType, Graph, Shape
from rlx.ir.ops.control import If, Loop
from rlx.ir.ops.elementwise import Cast, Identity
from rlx.ir.ops.logic import Compare, CompareOp
from rlx.ir.ops.shaping import Gather, Reshape
from rlx.models import mlp_graph

PASSWORD = "fuzz"
FAST_KDF = crypto.KdfParams(m_cost=64, t_cost=1, p_cost=1)
ENC_CHUNK = 1024  # the smallest chunk size: an encrypted seed spans several chunks


def artifact_bytes(file: RlxFile) -> bytes:
    return b"".join(bytes(p) for p in iter_rlx_bytes(file))


def encrypt(plain: bytes) -> bytes:
    """Any plaintext (damaged ones too) in a valid RLXENC01 container."""
    return crypto.encrypt_bytes(plain, PASSWORD, kdf=FAST_KDF, chunk_size=ENC_CHUNK,
                                expect_magic=None)


def _mlp() -> tuple[Graph, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    ternary = np.sign(rng.standard_normal((32, 16))) * (rng.random((32, 16)) > 0.5)
    weights = {"w1": ternary.astype(np.float32),
               "b1": rng.standard_normal(16).astype(np.float32),
               "w2": rng.standard_normal((32, 4)).astype(np.float32)[:16],
               "b2": rng.standard_normal(4).astype(np.float32)}
    return mlp_graph(batch="batch", n_in=32, hidden=16, n_out=4, name="mlp"), weights


def _control() -> Graph:
    """If over two branches and a Loop whose trip count is a constant: subgraphs on disk."""
    def branch(name: str, op: BinaryOp) -> Graph:
        g = Graph(name)
        a, b = g.input("a", Shape((3,))), g.input("b", Shape((3,)))
        g.set_outputs([g.binary(op, a, b), g.add_node(Identity(), [a])])
        return g

    body = Graph("body")
    i = body.input("i", Shape((), DType.I64))
    body.input("cond", Shape((), DType.BOOL))
    s, x = body.input("s", Shape((3,))), body.input("x", Shape((3,)))
    s_out = body.binary(BinaryOp.ADD, s, body.binary(
        BinaryOp.MUL, x, body.add_node(Cast(DType.F32), [i])))
    more = body.add_node(Compare(CompareOp.LT), [i, body.constant(np.int64(6))])
    body.set_outputs([more, s_out, body.add_node(Identity(), [s_out])])

    g = Graph("control")
    cond = g.input("cond", Shape((), DType.BOOL))
    x, y = g.input("x", Shape((3,))), g.input("y", Shape((3,)))
    picked = g.unpack(g.add_node(If(branch("then", BinaryOp.ADD), branch("else", BinaryOp.MUL)),
                                 [cond, x, y]))
    trips, go = g.constant(np.int64(4)), g.constant(np.bool_(True))
    looped = g.unpack(g.add_node(Loop(body, n_carried=1), [trips, go, picked[0], x]))
    g.set_outputs([picked[1], *looped])
    return g


def _gather() -> Graph:
    """Integer constants that steer kernels: gather indices and a reshape target."""
    g = Graph("gather")
    table = g.constant(np.arange(48, dtype=np.float32).reshape(12, 4), name="table")
    ids = g.input("ids", Shape(("n",), DType.I64))
    rows = g.add_node(Gather(axis=0), [table, ids])
    fixed = g.add_node(Gather(axis=0), [table, g.constant(np.int64([0, 11, -1]))])
    flat = g.add_node(Reshape((-1,)), [fixed])
    g.set_outputs([g.unary(Activation.TANH, rows), flat])
    return g


@functools.cache
def artifacts() -> dict[str, bytes]:
    """Plain artifacts by name: the MLP in both profiles and every memory mode, and more."""
    graph, weights = _mlp()
    out = {}
    for profile in (BakeProfile.EXACT, BakeProfile.SIZE):
        for mode in MemoryMode:
            opts = BakeOptions.from_profile(profile).replace(memory=mode)
            out[f"mlp-{profile.value}-{mode.value}"] = artifact_bytes(bake(graph, weights,
                                                                           opts)[0])
    for name, g in (("control", _control()), ("gather", _gather())):
        out[name] = artifact_bytes(bake(g, {})[0])
    from tests.hardening import mutate  # which imports this module

    # headers are written compressed; the plain form (older files, and headers too long to
    # compress) must stay fuzzed too
    for name in ("mlp-size-compact", "control", "gather"):
        out[f"{name}.plain-header"] = mutate.build_rlx(*mutate.split_rlx(out[name]))
    return out


@functools.cache
def rlxp_packages() -> dict[str, bytes]:
    """Packages of the MLP (size and exact, every tier) and of the control-flow graph,
    flat and zip."""
    from rlx.artifact import write_rlxp

    graph, weights = _mlp()
    files = {p: bake(graph, weights, BakeOptions.from_profile(p).replace(
        memory=MemoryMode.COMPACT))[0] for p in (BakeProfile.EXACT, BakeProfile.SIZE)}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for (profile, file), tier in zip(files.items(), ("hot", "warm")):
            for container in ("flat", "zip"):
                path = Path(tmp) / f"{profile.value}-{container}"
                write_rlxp(path, file, container, tier=tier, block_size=256)
                out[path.name] = path.read_bytes()
        path = Path(tmp) / "control"
        write_rlxp(path, bake(_control(), {})[0], "flat", tier="cold")
        out["control"] = path.read_bytes()
    return out


@functools.cache
def encrypted_artifacts() -> dict[str, bytes]:
    plain = artifacts()
    return {f"{name}.enc": encrypt(plain[name])
            for name in ("mlp-size-compact", "control.plain-header", "gather.plain-header")}


@functools.cache
def safetensors_files() -> dict[str, bytes]:
    rng = np.random.default_rng(1)
    tensors = {
        "w": rng.standard_normal((4, 3)).astype(np.float32),
        "h": rng.standard_normal(5).astype(np.float16),
        "b": rng.standard_normal((2, 2)).astype(ml_dtypes.bfloat16),
        "ids": np.arange(6, dtype=np.int64).reshape(2, 3),
        "mask": np.array([True, False]),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 3), np.int32),
    }
    return {"mixed": save_safetensors(tensors, metadata={"format": "np", "note": "seed"}),
            "one": save_safetensors({"x": np.ones(3, np.uint8)}),
            "none": save_safetensors({})}


def _numpy_tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {"w": rng.standard_normal((3, 4)).astype(np.float32),
            "ids": np.arange(5, dtype=np.int32), "flag": np.array(True),
            "f16": np.arange(4, dtype=np.float16), "col": np.asfortranarray(np.ones((2, 3)))}


@functools.cache
def npz_files() -> dict[str, bytes]:
    out = {}
    for name, save in (("stored", np.savez), ("deflated", np.savez_compressed)):
        buffer = io.BytesIO()
        save(buffer, **_numpy_tensors())
        out[name] = buffer.getvalue()
    return out


@functools.cache
def npy_files() -> dict[str, bytes]:
    out = {}
    for name, array in _numpy_tensors().items():
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        out[name] = buffer.getvalue()
    return out


@functools.cache
def gguf_files() -> dict[str, bytes]:
    """GGUF with metadata of every value type and dense plus block-quantized tensors."""
    rng = np.random.default_rng(3)
    q = gguf.GGMLQuantizationType
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.gguf"
        w = gguf.GGUFWriter(str(path), "fuzz")
        w.add_name("seed")
        w.add_uint32("fuzz.u32", 7)
        w.add_int64("fuzz.i64", -3)
        w.add_float32("fuzz.f32", 0.5)
        w.add_bool("fuzz.flag", True)
        w.add_array("fuzz.ints", [1, 2, 3])
        w.add_array("fuzz.words", ["a", "bc"])
        w.add_tensor("dense", rng.standard_normal((2, 8)).astype(np.float32))
        w.add_tensor("half", rng.standard_normal(4).astype(np.float16))
        w.add_tensor("ids", np.arange(3, dtype=np.int32))
        w.add_tensor("q8", quantize(rng.standard_normal((2, 32)).astype(np.float32), q.Q8_0),
                     raw_dtype=q.Q8_0)
        w.add_tensor("tq2", quantize(rng.integers(-1, 2, (1, 256)).astype(np.float32),
                                     q.TQ2_0), raw_dtype=q.TQ2_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return {"seed": path.read_bytes()}


@functools.cache
def dduf_files() -> dict[str, bytes]:
    """DDUF bundles written by huggingface_hub: a pipeline of two components (f16, bf16,
    f32 and int tensors, names that clash across components) and a one-component one."""
    from huggingface_hub import export_folder_as_dduf

    rng = np.random.default_rng(4)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, components in (("pipe", ("unet", "text_encoder")), ("one", ("unet",))):
            folder = Path(tmp) / name
            folder.mkdir()
            index = {"_class_name": "Toy", **{c: ["diffusers", "Model"] for c in components}}
            (folder / "model_index.json").write_text(json.dumps(index))
            for c in components:
                (folder / c).mkdir()
                (folder / c / "config.json").write_text("{}")
                save_safetensors_file({
                    "conv.weight": rng.standard_normal((3, 4)).astype(np.float16),
                    "norm": rng.standard_normal(4).astype(ml_dtypes.bfloat16),
                    "ids": np.arange(3, dtype=np.int64),
                    "scale": np.float32([1.5])}, str(folder / c / "model.safetensors"))
            export_folder_as_dduf(str(Path(tmp) / f"{name}.dduf"), str(folder))
            out[name] = (Path(tmp) / f"{name}.dduf").read_bytes()
    return out


def _mlx_layer(rng: np.random.Generator, n: int, k: int, bits: int, group: int,
               scale_dtype, biases: bool) -> dict[str, np.ndarray]:
    """One quantized layer as MLX stores it: uint32 code words, scales (and biases)."""
    layer = {"weight": rng.integers(0, 2**32, (n, k * bits // 32), dtype=np.uint32),
             "scales": rng.standard_normal((n, k // group)).astype(scale_dtype)}
    if biases:
        layer["biases"] = rng.standard_normal((n, k // group)).astype(scale_dtype)
    return layer


@functools.cache
def mlx_folders() -> dict[str, bytes]:
    """MLX model folders (config.json + model.safetensors), each carried as a STORE zip of
    its two files: affine layers of 2, 3, 4 and 8 bits with per-layer overrides, f16, f32
    and bf16 scales, an mxfp4 layer (uint8 scales, no biases), dense tensors beside them."""
    rng = np.random.default_rng(7)
    folders = {
        "affine": ({"group_size": 32, "bits": 4, "l2": {"bits": 8, "group_size": 64},
                    "l3": {"bits": 3, "group_size": 32}},
                   {"l1": (4, 64, 4, 32, np.float16, True),
                    "l2": (2, 128, 8, 64, np.float32, True),
                    "l3": (3, 64, 3, 32, np.float16, True)}),
        "two-bit": ({"group_size": 64, "bits": 2}, {"l1": (2, 128, 2, 64, np.float16, True)}),
        # safetensors.numpy cannot load bf16: the mutator's array lies skip this one
        "bf16": ({"group_size": 32, "bits": 8}, {"l1": (2, 64, 8, 32, ml_dtypes.bfloat16,
                                                        True)}),
        "mxfp4": ({"group_size": 32, "bits": 4, "mode": "mxfp4"},
                  {"l1": (2, 64, 4, 32, np.uint8, False)}),
    }
    out = {}
    for name, (quant, layers) in folders.items():
        tensors = {"norm": rng.standard_normal(8).astype(np.float32)}
        for base, spec in layers.items():
            for kind, array in _mlx_layer(rng, *spec).items():
                tensors[f"{base}.{kind}"] = array
        config = json.dumps({"model_type": "toy", "quantization": quant}).encode()
        out[name] = rezip({"config.json": config,
                           "model.safetensors": save_safetensors(tensors)}, compressed=False)
    return out


def zip_members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def rezip(members: dict[str, bytes], compressed: bool) -> bytes:
    """An archive with valid CRCs around (possibly mutated) members."""
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, body in members.items():
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), body,
                             compress_type=method)
    return buffer.getvalue()


# -- ONNX models ---------------------------------------------------------------------------
EXTERNAL_FILE = "weights.bin"  # written next to every ONNX case (see `prepare_onnx_folder`)
_EXTERNAL = np.arange(64, dtype=np.float32)


def prepare_onnx_folder(folder: Path) -> None:
    """What an ONNX case may point at: its external data file, and a symlink out of the
    folder (to this very source file, which exists, so that following it would succeed,
    and which leaves nothing behind beside a temporary folder)."""
    (folder / EXTERNAL_FILE).write_bytes(_EXTERNAL.tobytes())
    link = folder / "link.bin"
    if not link.is_symlink():
        link.symlink_to(Path(__file__).resolve())


def onnx_model(nodes, inputs, outputs, initializers=(), opset: int = 17, functions=()) -> bytes:
    from onnx import helper

    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              functions=list(functions))
    model.ir_version = 8
    return model.SerializeToString()


def value_info(name: str, dims, elem: int | None = None):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, elem or TensorProto.FLOAT, dims)


@functools.cache
def onnx_models() -> dict[str, bytes]:
    """Small models over the importer's paths: initializers (inline and external), shape
    arithmetic, convolutions, control flow with subgraphs, a local function."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)

    def init(name: str, array: np.ndarray):
        return numpy_helper.from_array(array, name)

    make = helper.make_node
    out = {}
    out["mlp"] = onnx_model(
        [make("MatMul", ["x", "w1"], ["h"]), make("Add", ["h", "b1"], ["hb"]),
         make("Relu", ["hb"], ["r"]), make("MatMul", ["r", "w2"], ["o"]),
         make("Softmax", ["o"], ["y"], axis=-1)],
        [value_info("x", ["batch", 8])], [value_info("y", ["batch", 4])],
        [init("w1", rng.standard_normal((8, 16)).astype(np.float32)),
         init("b1", rng.standard_normal(16).astype(np.float32)),
         init("w2", rng.standard_normal((16, 4)).astype(np.float32))])
    external = init("w", np.zeros((4, 4), np.float32))
    external.ClearField("raw_data")
    external.data_location = TensorProto.EXTERNAL
    for key, value in (("location", EXTERNAL_FILE), ("offset", "64"), ("length", "64")):
        external.external_data.add(key=key, value=value)
    out["external"] = onnx_model([make("MatMul", ["x", "w"], ["y"])],
                                 [value_info("x", [2, 4])], [value_info("y", [2, 4])], [external])
    out["shapes"] = onnx_model(
        [make("Shape", ["x"], ["s"]), make("Gather", ["s", "zero"], ["n"], axis=0),
         make("Unsqueeze", ["n", "zero1"], ["n1"]), make("Concat", ["n1", "minus"], ["t"],
                                                         axis=0),
         make("Reshape", ["x", "t"], ["r"]), make("Transpose", ["r"], ["tr"], perm=[1, 0]),
         make("Slice", ["tr", "st", "en"], ["y"])],
        [value_info("x", ["n", 2, 3])], [value_info("y", None)],
        [init("zero", np.array(0, np.int64)), init("zero1", np.array([0], np.int64)),
         init("minus", np.array([-1], np.int64)), init("st", np.array([1], np.int64)),
         init("en", np.array([5], np.int64))], opset=13)
    out["conv"] = onnx_model(
        [make("Conv", ["x", "k", "kb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
         make("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"]),
         make("HardSigmoid", ["bn"], ["a"]), make("MaxPool", ["a"], ["p"], kernel_shape=[2, 2]),
         make("GlobalAveragePool", ["p"], ["gp"]), make("Flatten", ["gp"], ["f"]),
         make("Gemm", ["f", "fw"], ["y"], transB=1)],
        [value_info("x", [1, 2, 6, 6])], [value_info("y", [1, 3])],
        [init("k", rng.standard_normal((4, 2, 3, 3)).astype(np.float32)),
         init("kb", rng.standard_normal(4).astype(np.float32)),
         init("g", np.ones(4, np.float32)), init("b", np.zeros(4, np.float32)),
         init("m", np.zeros(4, np.float32)), init("v", np.ones(4, np.float32)),
         init("fw", rng.standard_normal((3, 4)).astype(np.float32))], opset=11)

    def branch(name: str, op: str):
        return helper.make_graph([make(op, ["x", "x"], [f"{name}_y"])], name, [],
                                 [value_info(f"{name}_y", [3])])

    body = helper.make_graph(
        [make("Add", ["s", "x"], ["s_out"]), make("Less", ["i", "lim"], ["c_out"]),
         make("Identity", ["s_out"], ["scan"])], "body",
        [value_info("i", [], TensorProto.INT64), value_info("c", [], TensorProto.BOOL),
         value_info("s", [3])],
        [value_info("c_out", [], TensorProto.BOOL), value_info("s_out", [3]),
         value_info("scan", [3])],
        [init("lim", np.array(5, np.int64))])
    out["control"] = onnx_model(
        [make("If", ["cond"], ["picked"], then_branch=branch("then", "Add"),
              else_branch=branch("else", "Mul")),
         make("Loop", ["trips", "", "picked"], ["final", "scans"], body=body)],
        [value_info("cond", [], TensorProto.BOOL), value_info("x", [3])],
        [value_info("final", [3]), value_info("scans", None)],
        [init("trips", np.array(4, np.int64))], opset=16)
    square = helper.make_function("local", "Square", ["a"], ["b"],
                                  [make("Mul", ["a", "a"], ["b"])],
                                  [helper.make_opsetid("", 18)])
    out["function"] = onnx_model(
        [make("Square", ["x"], ["sq"], domain="local"),
         make("LayerNormalization", ["sq", "g", "b"], ["y"], axis=-1)],
        [value_info("x", [2, 4])], [value_info("y", [2, 4])],
        [init("g", np.ones(4, np.float32)), init("b", np.zeros(4, np.float32))], opset=18,
        functions=[square])
    return out
