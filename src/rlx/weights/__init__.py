"""Weight files -> `WeightBundle` (readers for safetensors, npz/npy and GGUF come here)."""

from rlx.weights.bundle import LoadedWeight, WeightBundle

__all__ = ["LoadedWeight", "WeightBundle"]
