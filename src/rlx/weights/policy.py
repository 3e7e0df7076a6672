"""The weight load policy and its verdict: decode packed source tensors to f32, or keep them.

Mirrors the reference's `WeightLoadPolicy` and `f32_first_verdict` (inventory section 6.1).
The verdict only concerns *packed* (block-quantized) source tensors: GO decodes them to dense
float32, NO-GO keeps them in their source encoding. Dense tensors always keep their native
dtype whatever the verdict (the reference's fix 9.9: integers never become floats).

MLX quantized layers count as packs. The reference's extra Auto rule for DDUF bundles
holds too: auto keeps native f16/bf16 tensors of a DDUF bundle (NO-GO), which for DDUF
means every tensor stays in its own dtype; elsewhere dense tensors keep theirs anyway.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from rlx.enums import parse_enum
from rlx.errors import WeightError

__all__ = [
    "WeightLoadPolicy", "WeightPathKind", "WeightSourceInfo", "F32FirstVerdict",
    "f32_first_verdict",
]


class WeightLoadPolicy(enum.Enum):
    """What to do with packed source tensors; the value is the `--weights-policy` spelling."""

    F32_FIRST = "f32"
    KEEP_PACKED = "packed"
    AUTO = "auto"

    @classmethod
    def parse(cls, text: str) -> WeightLoadPolicy:
        """Case-insensitive, with the reference's aliases."""
        return parse_enum(cls, text, lambda t: WeightError(
            f"unknown --weights-policy {t}; expected f32|packed|auto"), _ALIASES)

    def __str__(self) -> str:
        return self.value


_ALIASES = {
    WeightLoadPolicy.F32_FIRST: ("f32-first", "dense"),
    WeightLoadPolicy.KEEP_PACKED: ("keep-packed", "native"),
}


class WeightPathKind(enum.Enum):
    """What kind of weights path was loaded."""

    SAFETENSORS = "safetensors"
    NPZ = "npz"
    NPY = "npy"
    GGUF = "gguf"
    MLX = "mlx"
    DDUF = "dduf"
    DIRECTORY = "directory"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class WeightSourceInfo:
    """What the verdict needs to know about a source, found before anything is decoded.

    `has_packs`: some tensor is block-quantized (e.g. GGUF Q8_0); `has_native_half`: some
    dense tensor is f16 or bf16.
    """

    has_packs: bool = False
    has_native_half: bool = False
    path_kind: WeightPathKind = WeightPathKind.UNKNOWN


@dataclass(frozen=True)
class F32FirstVerdict:
    """GO: decode packed tensors to f32; NO-GO: keep them in their source encoding."""

    go: bool
    reason: str

    @property
    def is_go(self) -> bool:
        return self.go

    def __str__(self) -> str:
        return f"{'GO' if self.go else 'NO-GO'}: {self.reason}"


def f32_first_verdict(policy: WeightLoadPolicy, info: WeightSourceInfo,
                      opts: Any = None) -> F32FirstVerdict:
    """The reference's rules, first match wins, but for an explicit `packed`, honoured first.

    `opts` is anything with boolean `ternary` and `quant` attributes (a `BakeOptions`);
    None means no rewrites. The ternary/quant passes repack dense f32 MatMul weights, so
    `auto` decodes every weight for them; the reference did so for an explicit `packed`
    too, silently. Here `packed` keeps the packs and the rewrites take the dense weights.
    """
    if policy is WeightLoadPolicy.KEEP_PACKED:
        if info.has_packs or info.has_native_half:
            return F32FirstVerdict(False, "weights-policy=packed: source has packs/half — "
                                          "keep source encoding")
        return F32FirstVerdict(True, "weights-policy=packed but no packs/half — fall back to f32")
    if getattr(opts, "ternary", False) or getattr(opts, "quant", False):
        return F32FirstVerdict(True, "bake ternary/quant rewrites need f32 MatMul weights")
    if policy is WeightLoadPolicy.F32_FIRST:
        return F32FirstVerdict(True, "weights-policy=f32 (explicit)")
    if info.has_packs:
        return F32FirstVerdict(False, "auto: source has packs — keep them packed")
    if info.has_native_half and info.path_kind is WeightPathKind.DDUF:
        return F32FirstVerdict(False, "auto: DDUF bundle with native half tensors — keep "
                                      "them")
    return F32FirstVerdict(True, "auto: no beneficial packs — decode to f32")
