"""Engines: run a baked `.rlx` file on numpy, onnxruntime or OpenVINO behind one API.

`rlx.load(path, engine="auto") -> Model`; `Model.run(feeds)`. `numpy` is rlx's own runtime
(the portable reference); `onnxruntime` and `openvino` are built from the graph's ONNX
export in memory with the artifact's mapped weights handed over without copies; `auto`
measures the installed ones once per model and machine and caches the choice.
"""

from rlx._lazy import lazy_exports

_LAZY = {
    "load": "rlx.engines.model",
    "Model": "rlx.engines.model",
    "IoSpec": "rlx.engines.model",
    "ENGINES": "rlx.engines.registry",
    "PRECISIONS": "rlx.engines.registry",
    "available_engines": "rlx.engines.registry",
}
__all__ = ["ENGINES", "IoSpec", "Model", "PRECISIONS", "available_engines", "load"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
