"""ONNX tensors and attributes as numpy values and rlx dtypes.

Initializer bytes are validated against their declared shape before use (a truncated or
padded tensor is a malformed model, never silently reshaped); raw bytes become numpy views.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from rlx.errors import ModelImportError
from rlx.ir import DType
from rlx.onnx.external import ExternalData

__all__ = ["DTYPES", "dtype_of", "onnx_type_name", "tensor_to_array", "decode_attribute"]

DTYPES: dict[int, DType] = {
    TensorProto.FLOAT: DType.F32,
    TensorProto.FLOAT16: DType.F16,
    TensorProto.BFLOAT16: DType.BF16,
    TensorProto.DOUBLE: DType.F64,
    TensorProto.INT8: DType.I8,
    TensorProto.INT16: DType.I16,
    TensorProto.INT32: DType.I32,
    TensorProto.INT64: DType.I64,
    TensorProto.UINT8: DType.U8,
    TensorProto.UINT16: DType.U16,
    TensorProto.UINT32: DType.U32,
    TensorProto.UINT64: DType.U64,
    TensorProto.BOOL: DType.BOOL,
}
"""ONNX element types rlx has; the others (string, complex, 8/4/2-bit floats and ints) not."""

_TO_ONNX = {v: k for k, v in DTYPES.items()}

# which repeated field holds a tensor's values when it has no raw_data, and how many per element
_FIELDS: dict[int, tuple[str, int]] = {
    TensorProto.FLOAT: ("float_data", 1),
    TensorProto.DOUBLE: ("double_data", 1),
    TensorProto.INT64: ("int64_data", 1),
    TensorProto.UINT32: ("uint64_data", 1),
    TensorProto.UINT64: ("uint64_data", 1),
}


def onnx_type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"type {elem_type}"


def dtype_of(elem_type: int, what: str) -> DType:
    """The rlx dtype of an ONNX element type; ModelImportError naming `what` if it has none."""
    dtype = DTYPES.get(elem_type)
    if dtype is None:
        raise ModelImportError(f"{what}: element type {onnx_type_name(elem_type)} is not "
                               "supported by rlx")
    return dtype


def onnx_elem_type(dtype: DType) -> int:
    return _TO_ONNX[dtype]


def tensor_to_array(tensor: TensorProto, external: ExternalData, what: str) -> np.ndarray:
    """The tensor's values with its declared shape and native dtype (a view where possible)."""
    what = f"{what} {tensor.name!r}" if tensor.name else what
    dtype = dtype_of(tensor.data_type, what).numpy
    shape = _dims(tensor.dims, what)
    if tensor.data_location == TensorProto.EXTERNAL:
        entries = {e.key: e.value for e in tensor.external_data}
        return external.read(entries, dtype, shape, what)
    numel = math.prod(shape)
    if tensor.HasField("raw_data"):
        have, want = len(tensor.raw_data), numel * dtype.itemsize
        unit = "bytes"
    else:
        field, per = _FIELDS.get(tensor.data_type, ("int32_data", 1))
        have, want = len(getattr(tensor, field)), numel * per
        unit = f"values in {field}"
    if have != want:
        raise ModelImportError(f"{what}: holds {have} {unit}, shape {list(shape)} of "
                               f"{DTYPES[tensor.data_type]} needs {want}")
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as err:  # onnx raises several kinds on a malformed tensor
        raise ModelImportError(f"{what}: cannot decode tensor: {err}") from None
    if array.dtype != dtype:
        array = array.view(dtype) if array.dtype.itemsize == dtype.itemsize else \
            array.astype(dtype)
    return array.reshape(shape)


def decode_attribute(attr: AttributeProto, external: ExternalData, what: str) -> Any:
    """An attribute as a Python value: str for strings, numpy arrays for tensors, tuples
    for lists; graphs stay `GraphProto`s for the control-flow converters."""
    kind = attr.type
    if kind == AttributeProto.TENSOR:
        return tensor_to_array(attr.t, external, f"{what} attribute {attr.name!r}")
    if kind == AttributeProto.SPARSE_TENSOR:
        return sparse_to_array(attr.sparse_tensor, external, f"{what} attribute {attr.name!r}")
    if kind == AttributeProto.TENSORS:
        return tuple(tensor_to_array(t, external, f"{what} attribute {attr.name!r}")
                     for t in attr.tensors)
    value = onnx.helper.get_attribute_value(attr)
    if kind == AttributeProto.STRING:
        return value.decode("utf-8", errors="replace")
    if kind == AttributeProto.STRINGS:
        return tuple(v.decode("utf-8", errors="replace") for v in value)
    if isinstance(value, list):
        return tuple(value)
    return value


MAX_RANK = 32  # what every numpy can reshape to


def _dims(dims, what: str) -> tuple[int, ...]:
    """Dims an array can have: none negative, at most MAX_RANK, and the product of the
    non-zero ones indexable (`[0, 2**63 - 1]` holds no bytes, yet numpy cannot shape it)."""
    shape = tuple(int(d) for d in dims)
    if any(d < 0 for d in shape):
        raise ModelImportError(f"{what}: negative dim in {list(shape)}")
    if len(shape) > MAX_RANK or math.prod(max(d, 1) for d in shape) >= 2**62:
        raise ModelImportError(f"{what}: dims {list(shape)} are more than an array can hold")
    return shape


def sparse_to_array(sparse: onnx.SparseTensorProto, external: ExternalData,
                    what: str) -> np.ndarray:
    """A sparse tensor (COO, linear or per-axis indices) made dense, once everything it
    declares is checked: its dims, `values` a vector of nnz <= numel entries, `indices`
    `[nnz]` or `[nnz, rank]` and in range, and the dense result within what the model
    may cost (`ExternalData.spend_dense`: a 108-byte model declared 1 GiB)."""
    shape = _dims(sparse.dims, what)
    values = tensor_to_array(sparse.values, external, f"{what} values")
    indices = tensor_to_array(sparse.indices, external, f"{what} indices")
    numel, nnz = math.prod(shape), values.size
    if values.ndim != 1 or nnz > numel:
        raise ModelImportError(f"{what}: values of shape {list(values.shape)} for dims "
                               f"{list(shape)}; expected a vector of at most {numel} values")
    forms = ((nnz,), (nnz, len(shape))) if shape else ((nnz,),)
    if indices.dtype.kind not in "iu" or indices.shape not in forms:
        raise ModelImportError(f"{what}: indices of shape {list(indices.shape)} "
                               f"({indices.dtype}); expected [{nnz}] or [{nnz}, {len(shape)}] "
                               "integers")
    bounds = np.array(shape, np.int64) if indices.ndim == 2 else np.array([numel], np.int64)
    if nnz and (np.any(indices < 0) or np.any(indices >= bounds)):
        raise ModelImportError(f"{what}: sparse indices out of range for {list(shape)}")
    external.spend_dense(numel * values.dtype.itemsize, what)
    dense = np.zeros(numel, values.dtype)
    flat = indices.astype(np.int64)
    if flat.ndim == 2:
        flat = np.ravel_multi_index(tuple(flat.T), shape)
    dense[flat.reshape(-1)] = values
    return dense.reshape(shape)
