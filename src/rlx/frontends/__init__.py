"""Model frontends: read models written by other tools into an rlx `Graph` plus bindings.

`import_onnx` (the ONNX importer, `rlx.frontends.onnx`) is the only code in rlx that
imports the `onnx` package; it is loaded on first use, so the other frontends stay light.
"""

from __future__ import annotations

__all__ = ["import_onnx"]


def __getattr__(name: str):
    if name == "import_onnx":
        from rlx.frontends.onnx import import_onnx

        return import_onnx
    raise AttributeError(f"module 'rlx.frontends' has no attribute {name!r}")
