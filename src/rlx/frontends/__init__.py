"""Model frontends: read models written by other tools into an rlx `Graph` plus bindings.

`load_model` reads any model input (ONNX, graph JSON, a bundle folder); `import_onnx` (the
ONNX importer, `rlx.onnx`) is the only code in rlx that imports the `onnx`
package. Names load on first use (`rlx._lazy`), so the other frontends stay light.
"""

from rlx._lazy import lazy_exports

_LAZY = {
    "import_onnx": "rlx.onnx",
    "LoadedModel": "rlx.frontends.load",
    "load_model": "rlx.frontends.load",
}
__all__ = ["LoadedModel", "import_onnx", "load_model"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
