"""`WeightLoadPolicy.parse` and the reference's verdict rules (inventory section 6.1)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlx import BakeOptions
from rlx.errors import WeightError
from rlx.weights import (
    F32FirstVerdict,
    WeightLoadPolicy,
    WeightPathKind,
    WeightSourceInfo,
    f32_first_verdict,
)

P = WeightLoadPolicy
NO_REWRITES = SimpleNamespace(ternary=False, quant=False)
PACKS = WeightSourceInfo(has_packs=True, path_kind=WeightPathKind.GGUF)
HALF = WeightSourceInfo(has_native_half=True, path_kind=WeightPathKind.SAFETENSORS)
PLAIN = WeightSourceInfo(path_kind=WeightPathKind.SAFETENSORS)


@pytest.mark.parametrize("text, policy", [
    ("f32", P.F32_FIRST), ("F32-First", P.F32_FIRST), ("dense", P.F32_FIRST),
    ("packed", P.KEEP_PACKED), ("KEEP-PACKED", P.KEEP_PACKED), ("native", P.KEEP_PACKED),
    ("Auto", P.AUTO),
])
def test_parse_names_and_aliases(text, policy):
    assert P.parse(text) is policy


@pytest.mark.parametrize("text", ["", "fp32", "keep_packed", "mlx"])
def test_parse_refuses_unknown(text):
    with pytest.raises(WeightError,
                       match=f"unknown --weights-policy {text}; expected f32\\|packed\\|auto"):
        P.parse(text)


def test_default_and_str():
    assert str(P.F32_FIRST) == "f32" and str(P.KEEP_PACKED) == "packed"
    assert str(F32FirstVerdict(False, "why")) == "NO-GO: why"


@pytest.mark.parametrize("policy, info, opts, go, reason", [
    # 1. an explicit packed is honoured (the rewrites take the dense weights)
    (P.KEEP_PACKED, PACKS, SimpleNamespace(ternary=True, quant=False), False,
     "weights-policy=packed: source has packs/half"),
    (P.KEEP_PACKED, PACKS, SimpleNamespace(ternary=True, quant=True), False,
     "weights-policy=packed: source has packs/half"),
    # 2. otherwise ternary/quant rewrites need f32 weights
    (P.AUTO, PACKS, SimpleNamespace(ternary=False, quant=True), True,
     "bake ternary/quant rewrites need f32 MatMul weights"),
    # 3. f32-first always decodes
    (P.F32_FIRST, PACKS, NO_REWRITES, True, "weights-policy=f32 (explicit)"),
    (P.F32_FIRST, PLAIN, None, True, "weights-policy=f32 (explicit)"),
    # 4. keep-packed keeps packs or half, else falls back
    (P.KEEP_PACKED, PACKS, NO_REWRITES, False, "weights-policy=packed: source has packs/half"),
    (P.KEEP_PACKED, HALF, NO_REWRITES, False, "weights-policy=packed: source has packs/half"),
    (P.KEEP_PACKED, PLAIN, None, True, "weights-policy=packed but no packs/half"),
    # 5. auto keeps packs only
    (P.AUTO, PACKS, NO_REWRITES, False, "auto: source has packs"),
    (P.AUTO, HALF, NO_REWRITES, True, "auto: no beneficial packs — decode to f32"),
    (P.AUTO, PLAIN, None, True, "auto: no beneficial packs — decode to f32"),
    # the reference's auto rule for DDUF: native half tensors of a DDUF bundle are kept
    (P.AUTO, WeightSourceInfo(False, True, WeightPathKind.DDUF), NO_REWRITES, False,
     "auto: DDUF bundle with native half tensors"),
    (P.AUTO, WeightSourceInfo(False, False, WeightPathKind.DDUF), NO_REWRITES, True,
     "auto: no beneficial packs"),
])
def test_verdict_rules(policy, info, opts, go, reason):
    verdict = f32_first_verdict(policy, info, opts)
    assert verdict.go is go and verdict.is_go is go
    assert verdict.reason.startswith(reason)


def test_verdict_ternary_forces_f32_under_auto_only():
    """The reference's test had exact profile + keep-packed + packs -> GO (the explicit
    policy silently overridden); here auto decodes for the rewrites, packed keeps packs."""
    opts = BakeOptions.from_profile("exact")
    assert opts.ternary
    assert f32_first_verdict(P.AUTO, PACKS, opts).go
    assert not f32_first_verdict(P.KEEP_PACKED, PACKS, opts).go


def test_verdict_auto_keeps_packs():
    """Reference test `verdict_auto_keeps_mlx_packs`: merge profile + auto + packs -> NO-GO."""
    opts = BakeOptions.from_profile("merge")
    assert not f32_first_verdict(P.AUTO, PACKS, opts).go
