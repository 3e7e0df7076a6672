"""Weight files -> `WeightBundle`: safetensors, npz/npy and GGUF readers, and the load policy.

Names load on first use (`rlx._lazy`), so gguf is imported only when weights are loaded.
"""

from rlx._lazy import lazy_exports

_LAZY = {
    "LoadedWeight": "rlx.weights.bundle",
    "WeightBundle": "rlx.weights.bundle",
    "load_weights": "rlx.weights.load",
    "load_weights_f32": "rlx.weights.load",
    "overlay_weights": "rlx.weights.overlay",
    "F32FirstVerdict": "rlx.weights.policy",
    "WeightLoadPolicy": "rlx.weights.policy",
    "WeightPathKind": "rlx.weights.policy",
    "WeightSourceInfo": "rlx.weights.policy",
    "f32_first_verdict": "rlx.weights.policy",
}
__all__ = [
    "F32FirstVerdict", "LoadedWeight", "WeightBundle", "WeightLoadPolicy", "WeightPathKind",
    "WeightSourceInfo", "f32_first_verdict", "load_weights", "load_weights_f32",
    "overlay_weights",
]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
