"""Weight files -> `WeightBundle`: safetensors, npz/npy and GGUF readers, and the load policy."""

from rlx.weights.bundle import LoadedWeight, WeightBundle
from rlx.weights.load import load_weights, load_weights_f32
from rlx.weights.policy import (
    F32FirstVerdict, WeightLoadPolicy, WeightPathKind, WeightSourceInfo, f32_first_verdict,
)

__all__ = [
    "LoadedWeight", "WeightBundle", "load_weights", "load_weights_f32", "WeightLoadPolicy",
    "WeightPathKind", "WeightSourceInfo", "F32FirstVerdict", "f32_first_verdict",
]
