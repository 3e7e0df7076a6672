"""Converters, one module per op family; importing this package registers them all."""

from rlx.onnx.ops import (  # noqa: F401
    col2im,
    contrib_fused,
    contrib_quant,
    control,
    detection,
    elementwise,
    linalg,
    nn,
    quant,
    reduce,
    resize,
    sampling,
    shaping,
    signal,
    text,
    unique,
)

__all__: list[str] = []  # it registers; nothing here is imported by name
