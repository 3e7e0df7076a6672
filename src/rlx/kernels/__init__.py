"""Kernels by op family, registered in `rlx.kernels.registry` as their modules are imported.

A compile imports the kernels of its ops (their families') only (`registry.load_kernels`); this
package's names, the complete registries, import every kernel module on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

KERNEL_MODULES = ("blocks", "channelwise", "control", "einsum", "elementwise", "generators",
                  "indexing", "integer", "linalg", "logic", "multi", "nn", "packed", "qlinear",
                  "quant", "reduce", "resize", "shaping", "slicing", "spectral", "windows")
"""Every module that registers kernels."""

__all__ = ["BUILDERS", "KERNELS", "WRITES_INTO", "has_kernel"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module in KERNEL_MODULES:
        importlib.import_module(f"{__name__}.{module}")
    value = getattr(importlib.import_module(f"{__name__}.registry"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value
