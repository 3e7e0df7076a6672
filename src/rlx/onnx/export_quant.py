"""Packed weights (GGUF Q8_0 / TQ2_0 behind a `DequantMatMul`) in ONNX terms.

Three forms, chosen per export (`PackedForm`):

- `nbits`: onnxruntime's `com.microsoft.MatMulNBits` (Q8_0: 8 bits, block 32; TQ2_0: 2 bits,
  block 256), codes re-packed into its unsigned layout with f32 block scales; the weight
  stays at ~1.06 (Q8_0) or ~0.26 (TQ2_0) bytes per value. Needs K to be a whole number of
  blocks per row, and an onnxruntime that runs the op (`nbits_supported` probes it once).
- `decompress`: standard ONNX, an int8 code constant -> Cast -> Mul by the block scales ->
  Reshape -> MatMul. OpenVINO's CPU plugin recognises that pattern and keeps the int8
  weight compressed; any other runtime computes the same values.
- `dequantize`: the f32 weight decoded by `rlx.codecs`, for runtimes with neither.
"""

from __future__ import annotations

import enum
import functools

import numpy as np

from rlx.codecs import Encoding
from rlx.ir.ops.dequant import DequantMatMul

__all__ = ["PackedForm", "nbits_arrays", "decompress_arrays", "nbits_supported",
           "nbits_bits", "nbits_block"]


class PackedForm(enum.Enum):
    NBITS = "nbits"
    DECOMPRESS = "decompress"
    DEQUANTIZE = "dequantize"


_NBITS = {Encoding.GGUF_Q8_0: (8, 32), Encoding.GGUF_TQ2_0: (2, 256)}


def nbits_bits(scheme: Encoding) -> int:
    return _NBITS[scheme][0]


def nbits_block(scheme: Encoding) -> int:
    return _NBITS[scheme][1]


def _scales(blocks: np.ndarray, first: int) -> np.ndarray:
    """The f16 block scales stored at byte `first` of each block, as f32."""
    return np.ascontiguousarray(blocks[:, first:first + 2]).view("<f2").astype(np.float32)[:, 0]


def nbits_arrays(op: DequantMatMul, packed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(B u8 [N, K/block, blob], scales f32 [N * K/block]) for MatMulNBits.

    MatMulNBits' default zero point is 2^(bits-1), so a Q8_0 code c is stored as c + 128 and
    a TQ2_0 code (already value + 1) as code + 1, each packed low bits first.
    """
    s = op.scheme
    blocks = np.asarray(packed).reshape(-1, s.block_bytes)
    n, per_row = op.n, k // s.block_size
    if s is Encoding.GGUF_Q8_0:
        codes = (blocks[:, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return codes.reshape(n, per_row, 32), _scales(blocks, 0)
    # TQ2_0: byte m of half h holds positions h*128 + m + 32*j in bit pair j
    raw = blocks[:, :64].reshape(-1, 2, 1, 32)
    pairs = (raw >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & 3  # [blocks, 2, 4, 32]
    sequential = pairs.reshape(-1, 256) + np.uint8(1)  # sequential positions, value + 2
    quads = sequential.reshape(-1, 64, 4)
    packed_b = (quads[..., 0] | quads[..., 1] << 2 | quads[..., 2] << 4 | quads[..., 3] << 6)
    return packed_b.astype(np.uint8).reshape(n, per_row, 64), _scales(blocks, 64)


def decompress_arrays(op: DequantMatMul, packed: np.ndarray,
                      k: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes i8 [N, K/block, block], scales f32 [N, K/block, 1]): code * scale = W^T."""
    s = op.scheme
    blocks = np.asarray(packed).reshape(-1, s.block_bytes)
    per_row = k // s.block_size
    if s is Encoding.GGUF_Q8_0:
        codes = np.ascontiguousarray(blocks[:, 2:]).view(np.int8)
        scales = _scales(blocks, 0)
    else:
        raw = blocks[:, :64].reshape(-1, 2, 1, 32)
        codes = (((raw >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & 3).astype(np.int8)
                 - np.int8(1)).reshape(-1, 256)
        scales = _scales(blocks, 64)
    return (codes.reshape(op.n, per_row, s.block_size),
            scales.reshape(op.n, per_row, 1))


@functools.cache
def nbits_supported(bits: int, block: int) -> bool:
    """Whether the installed onnxruntime runs MatMulNBits with `bits` and `block` (and gets
    the right answer on a tiny case); False when onnxruntime is not installed."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return False
    k, n = block, 2
    blob = block * bits // 8
    codes = np.arange(n * blob, dtype=np.uint8).reshape(n, 1, blob)
    scales = np.ones(n, np.float32)
    node = helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain="com.microsoft",
                            K=k, N=n, bits=bits, block_size=block)
    graph = helper.make_graph(
        [node], "probe", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(codes, "b"), numpy_helper.from_array(scales, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # a probe: its warnings are nobody's business
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        got = session.run(None, {"a": np.ones((1, k), np.float32)})[0]
    except Exception:  # noqa: BLE001 - any failure means "not supported here"
        return False
    per = 8 // bits
    values = ((codes.reshape(n, blob, 1) >> (np.arange(per, dtype=np.uint8) * bits))
              & ((1 << bits) - 1)).astype(np.float32) - (1 << (bits - 1))
    return bool(np.allclose(got[0], values.reshape(n, k).sum(axis=1), atol=1e-3))
