"""GGUF reader (a bounded parser of its own, memory-mapping the data) and decoder of its packs.

Why not the `gguf` package's `GGUFReader`: it builds a numpy object per metadata array
element (measured: 50 us and 700 bytes each, so a 100 KB file of one byte array took 5 s
and 70 MB), and loops for as long as an array's count says even past the end of the file.
rlx needs only the tensors: metadata values are skipped, with every count checked against
the bytes that remain, so parsing costs O(file size) time and no memory.

Shapes: GGUF lists a tensor's dims fastest-first (`ne[0]` is the contiguous axis), so the
numpy shape rlx gives is `reversed(ne)` - the same as `GGUFReader`'s own arrays and as the
PyTorch weight a converter started from. A linear layer stored as `ne = [K, N]` is the numpy
matrix `[N, K]`: each of its N rows holds K values, cut into blocks along K - the
"BT [N, K]" layout `DequantMatMul` consumes. Every matrix is listed in `SourceTensors.bt`,
so the bake binds a dense (or decoded) one to a MatMul's `[K, N]` weight transposed, as
the packed path uses the same bytes.

Plain tensors (F32, F16, BF16, F64, I8..I64) become dense arrays in their own dtype, as
read-only views of the map. Block-quantized ones become `LoadedWeight`s with the encoding
`gguf_<type>` (e.g. `gguf_q8_0`) and their raw block bytes; `decode_packed` turns one into
float32 (rlx's codecs for the encodings rlx runs, the `gguf` package's dequantizers for the
rest).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUFValueType
from gguf.quants import dequantize

from rlx.codecs import Encoding, decode
from rlx.errors import WeightError
from rlx.safeio import map_file
from rlx.weights.bundle import LoadedWeight
from rlx.weights.source import SourceTensors

__all__ = ["read_gguf", "decode_packed", "RUNNABLE_PACKS"]

_Q = gguf.GGMLQuantizationType
_DENSE: dict[gguf.GGMLQuantizationType, np.dtype] = {q: np.dtype(t) for q, t in {
    _Q.F32: "<f4", _Q.F16: "<f2", _Q.BF16: ml_dtypes.bfloat16, _Q.F64: "<f8",
    _Q.I8: "i1", _Q.I16: "<i2", _Q.I32: "<i4", _Q.I64: "<i8",
}.items()}
_PREFIX = "gguf_"
# The block encodings rlx's codecs (and so `DequantMatMul`) run; other packs can only be decoded.
RUNNABLE_PACKS: tuple[str, ...] = tuple(e.value for e in Encoding
                                      if e.is_block_quantized and not e.is_mlx)
_MAGIC = b"GGUF"
_VERSIONS = (2, 3)  # v1 had 32-bit counts; the gguf package reads 2 and 3 too
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 8  # arrays of arrays: deeper is no model's metadata, only a recursion bomb
_V = GGUFValueType
_SCALAR_SIZES = {_V.UINT8: 1, _V.INT8: 1, _V.BOOL: 1, _V.UINT16: 2, _V.INT16: 2,
                 _V.UINT32: 4, _V.INT32: 4, _V.FLOAT32: 4, _V.UINT64: 8, _V.INT64: 8,
                 _V.FLOAT64: 8}


class _Corrupt(Exception):
    """A structural fault, reported by `read_gguf` as a WeightError naming the file."""


@dataclass(frozen=True)
class _TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order: reversed(ne)
    qtype: gguf.GGMLQuantizationType
    offset: int  # from the start of the data section
    nbytes: int


class _Cursor:
    """Reads little-endian values from a buffer; never past its end."""

    def __init__(self, buf: memoryview, at: int = 0):
        self.buf, self.at = buf, at

    def take(self, n: int) -> memoryview:
        if n > len(self.buf) - self.at:
            raise _Corrupt(f"needs {n} bytes at offset {self.at}, the file ends at "
                           f"{len(self.buf)}")
        self.at += n
        return self.buf[self.at - n:self.at]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def text(self) -> str:
        try:
            return str(self.take(self.u64()), "utf-8")
        except UnicodeDecodeError as err:
            raise _Corrupt(f"a string is not UTF-8 ({err.reason})") from None

    def value_type(self) -> GGUFValueType:
        code = self.u32()
        try:
            return GGUFValueType(code)
        except ValueError:
            raise _Corrupt(f"unknown metadata value type {code}") from None

    def skip_value(self, kind: GGUFValueType, depth: int = 0) -> None:
        """Step over one metadata value; array counts are checked against what is left."""
        if kind in _SCALAR_SIZES:
            self.take(_SCALAR_SIZES[kind])
        elif kind is _V.STRING:
            self.take(self.u64())
        elif depth >= _MAX_NESTING:
            raise _Corrupt(f"metadata arrays nest deeper than {_MAX_NESTING} levels")
        else:
            item, count = self.value_type(), self.u64()
            if item in _SCALAR_SIZES:
                self.take(count * _SCALAR_SIZES[item])
                return
            minimum = 8 if item is _V.STRING else 12  # a length, or an item type and count
            if count * minimum > len(self.buf) - self.at:
                raise _Corrupt(f"an array of {count} items does not fit in the file")
            for _ in range(count):
                self.skip_value(item, depth + 1)


def _parse(buf: memoryview) -> tuple[list[_TensorInfo], int]:
    """The tensor table and the data section's offset, every size checked."""
    cursor = _Cursor(buf)
    if bytes(cursor.take(4)) != _MAGIC:
        raise _Corrupt("GGUF magic invalid")
    version = cursor.u32()
    if version not in _VERSIONS:
        raise _Corrupt(f"unsupported version {version}")
    n_tensors, n_kv = cursor.u64(), cursor.u64()
    alignment, keys = GGUF_DEFAULT_ALIGNMENT, set()
    for _ in range(n_kv):
        key, kind = cursor.text(), cursor.value_type()
        if key in keys:
            raise _Corrupt(f"duplicate metadata key {key!r}")
        keys.add(key)
        if key == "general.alignment":
            alignment = cursor.u32() if kind is _V.UINT32 else 0
            if alignment == 0 or alignment & (alignment - 1):
                raise _Corrupt("general.alignment must be a u32 power of two")
        else:
            cursor.skip_value(kind)
    infos, names = [], set()
    for _ in range(n_tensors):
        info = _tensor_info(cursor)
        if info.name in names:
            raise _Corrupt(f"duplicate tensor {info.name!r}")
        names.add(info.name)
        infos.append(info)
    start = -(-cursor.at // alignment) * alignment
    total = 0
    for info in infos:
        if start + info.offset + info.nbytes > len(buf):
            raise _Corrupt(f"tensor {info.name!r} ends at {start + info.offset + info.nbytes},"
                           f" past the end of the file ({len(buf)} bytes)")
        total += info.nbytes
    # Tensors may share bytes (nothing in the format forbids it), but 2,000 tensors over one
    # stream decoded to 1.9 GiB from 139 KB: all of them together may not claim more bytes
    # than the file holds, which bounds what decoding costs by the file's size.
    if total > len(buf):
        raise _Corrupt(f"its {len(infos)} tensors claim {total} bytes, the file holds "
                       f"{len(buf)}: tensors overlap")
    return infos, start


def _tensor_info(cursor: _Cursor) -> _TensorInfo:
    name, n_dims = cursor.text(), cursor.u32()
    if n_dims > _MAX_DIMS:
        raise _Corrupt(f"tensor {name!r} has {n_dims} dims (at most {_MAX_DIMS})")
    ne = [cursor.u64() for _ in range(n_dims)]
    code, offset = cursor.u32(), cursor.u64()
    try:
        qtype = _Q(code)
        block, block_bytes = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise _Corrupt(f"tensor {name!r} has unknown type {code}") from None
    if math.prod(max(d, 1) for d in ne) >= 2**62:  # a 0 next to dims numpy cannot index
        raise _Corrupt(f"tensor {name!r}: dims {ne} are more than an array can hold")
    row = ne[0] if ne else 1
    if row % block:
        raise _Corrupt(f"tensor {name!r}: {qtype.name} rows of {row} values are not whole "
                       f"blocks of {block}")
    nbytes = math.prod(ne) // block * block_bytes  # Python ints: no overflow
    return _TensorInfo(name, tuple(reversed(ne)), qtype, offset, nbytes)


def read_gguf(path: Path) -> SourceTensors:
    """Every tensor of a GGUF file: plain ones dense, block-quantized ones packed."""
    buffer = map_file(path, WeightError).buffer  # a leased map: rlx.safeio.mapping
    data = np.frombuffer(buffer, np.uint8) if len(buffer) else np.zeros(0, np.uint8)
    if bytes(data[:4]) == _MAGIC and len(data) >= 8 and not data[4] | data[5]:
        # the version's low half is 0: a byte-swapped (big-endian) version number
        raise WeightError(f"{path} is a big-endian GGUF file; rlx reads little-endian GGUF")
    try:
        infos, start = _parse(data.data)
    except _Corrupt as err:
        raise WeightError(f"corrupt GGUF file {path}: {err}") from None
    source = SourceTensors()
    for info in infos:
        if len(info.shape) == 2:
            source.bt.add(info.name)
        raw = data[start + info.offset:start + info.offset + info.nbytes].view(np.ndarray)
        dtype = _DENSE.get(info.qtype)
        if dtype is None:
            encoding = _PREFIX + info.qtype.name.lower()
            source.packs.append(LoadedWeight(info.name, info.shape, encoding, raw))
        else:
            source.dense[info.name] = raw.view(dtype).reshape(info.shape)
    return source


def decode_packed(weight: LoadedWeight, path: Path) -> np.ndarray:
    """A packed GGUF tensor as dense float32 of its logical shape."""
    if weight.encoding in RUNNABLE_PACKS:
        count = math.prod(weight.shape)
        return decode(weight.encoding, weight.data, count).reshape(weight.shape)
    qtype = gguf.GGMLQuantizationType[weight.encoding.removeprefix(_PREFIX).upper()]
    if not weight.data.size:  # the package's dequantizers fail on zero blocks
        return np.zeros(weight.shape, np.float32)
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    blocks = weight.data.reshape(-1, block_bytes)
    out = np.empty((len(blocks), block), np.float32)
    # The package's dequantizers build temporaries of up to ~3x their output (IQ1_S: 57
    # bytes a packed byte at once); decoding a slice at a time keeps the cost at the output
    # (at most 20.5 f32 bytes a packed byte, IQ1_S) plus a few MiB.
    step = max(1, _DECODE_SLICE // block_bytes)
    try:
        for at in range(0, len(blocks), step):
            out[at:at + step] = dequantize(blocks[at:at + step], qtype)
    except NotImplementedError as err:
        raise WeightError(f"cannot decode GGUF {qtype.name} tensor {weight.name!r} in {path}: "
                          f"{err}") from None
    return out.reshape(weight.shape)


_DECODE_SLICE = 64 << 10  # packed bytes decoded at a time by the gguf package
