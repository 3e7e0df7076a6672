"""GGUF reader (the `gguf` package's memory-mapping `GGUFReader`) and decoder of its packs.

Shapes: GGUF lists a tensor's dims fastest-first (`ne[0]` is the contiguous axis), so the
numpy shape rlx gives is `reversed(ne)` - the same as `GGUFReader`'s own arrays and as the
PyTorch weight a converter started from. A linear layer stored as `ne = [K, N]` is the numpy
matrix `[N, K]`: each of its N rows holds K values, cut into blocks along K - the
"BT [N, K]" layout `DequantMatMul` consumes.

Plain tensors (F32, F16, BF16, F64, I8..I64) become dense arrays in their own dtype, as
read-only views of the map. Block-quantized ones become `LoadedWeight`s with the encoding
`gguf_<type>` (e.g. `gguf_q8_0`) and their raw block bytes; `decode_packed` turns one into
float32 (rlx's codecs for the encodings rlx runs, the `gguf` package's dequantizers for the
rest).
"""

from __future__ import annotations

import math
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np
from gguf.quants import dequantize, quant_shape_to_byte_shape

from rlx.codecs import Encoding, decode
from rlx.errors import WeightError
from rlx.weights.bundle import LoadedWeight
from rlx.weights.source import SourceTensors, reading

__all__ = ["read_gguf", "decode_packed", "RUNNABLE_PACKS"]

_Q = gguf.GGMLQuantizationType
_DENSE: dict[gguf.GGMLQuantizationType, np.dtype] = {q: np.dtype(t) for q, t in {
    _Q.F32: "<f4", _Q.F16: "<f2", _Q.BF16: ml_dtypes.bfloat16, _Q.F64: "<f8",
    _Q.I8: "i1", _Q.I16: "<i2", _Q.I32: "<i4", _Q.I64: "<i8",
}.items()}
_PREFIX = "gguf_"
# The block encodings rlx's codecs (and so `DequantMatMul`) run; other packs can only be decoded.
RUNNABLE_PACKS: tuple[str, ...] = tuple(e.value for e in Encoding if e.is_block_quantized)
# What GGUFReader raises on a damaged file: bad magic/version/type codes and short data
# (ValueError), a duplicate key (KeyError), reads past the end (IndexError).
_READ_ERRORS = (ValueError, KeyError, IndexError, OverflowError)


def read_gguf(path: Path) -> SourceTensors:
    """Every tensor of a GGUF file: plain ones dense, block-quantized ones packed."""
    with reading(path, "GGUF", *_READ_ERRORS):
        reader = gguf.GGUFReader(path, "r")
    if reader.endianess is not gguf.GGUFEndian.LITTLE:
        raise WeightError(f"{path} is a big-endian GGUF file; rlx reads little-endian GGUF")
    source = SourceTensors()
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        raw = t.data.view(np.ndarray).reshape(-1)
        dtype = _DENSE.get(t.tensor_type)
        if dtype is None:
            encoding = _PREFIX + t.tensor_type.name.lower()
            source.packs.append(LoadedWeight(t.name, shape, encoding, raw))
        else:
            source.dense[t.name] = raw.view(dtype).reshape(shape)
    return source


def decode_packed(weight: LoadedWeight, path: Path) -> np.ndarray:
    """A packed GGUF tensor as dense float32 of its logical shape."""
    if weight.encoding in RUNNABLE_PACKS:
        count = math.prod(weight.shape)
        return decode(weight.encoding, weight.data, count).reshape(weight.shape)
    qtype = _Q[weight.encoding.removeprefix(_PREFIX).upper()]
    blocks = weight.data.reshape(quant_shape_to_byte_shape(weight.shape, qtype))
    try:
        return dequantize(blocks, qtype).astype(np.float32, copy=False)
    except NotImplementedError as err:
        raise WeightError(f"cannot decode GGUF {qtype.name} tensor {weight.name!r} in {path}: "
                          f"{err}") from err
