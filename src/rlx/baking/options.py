"""Bake profiles and the options they expand to (the reference's profile table)."""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rlx.artifact.memory import MemoryMode
from rlx.enums import parse_enum
from rlx.errors import BakeError

__all__ = ["BakeProfile", "BakeOptions"]

log = logging.getLogger(__name__)


class BakeProfile(enum.Enum):
    MERGE = "merge"
    FOLD = "fold"
    EXACT = "exact"
    SIZE = "size"
    FAST = "fast"

    @classmethod
    def parse(cls, text: str) -> BakeProfile:
        old = text.strip().lower()
        if old in _RENAMED:
            log.warning("bake profile %r is an old name: use %r", old, _RENAMED[old].value)
            return _RENAMED[old]
        return parse_enum(cls, text, lambda t: BakeError(
            f"unknown bake profile {t!r}; expected one of {', '.join(cls.all_names())}"),
            _ALIASES)

    @classmethod
    def all_names(cls) -> list[str]:
        """Canonical names first, then aliases (the old names still accepted are not listed)."""
        return [p.value for p in cls] + [a for p in cls for a in _ALIASES[p]]

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]

    def options(self) -> BakeOptions:
        return BakeOptions.from_profile(self)

    def __str__(self) -> str:
        return self.value


_ALIASES: dict[BakeProfile, tuple[str, ...]] = {
    BakeProfile.MERGE: ("raw",),
    BakeProfile.FOLD: (),
    BakeProfile.EXACT: ("lossless",),
    BakeProfile.SIZE: (),
    BakeProfile.FAST: (),
}
# old names, accepted with a warning naming the new one ("compact" is also a memory mode)
_RENAMED = {"none": BakeProfile.MERGE, "cleanup": BakeProfile.FOLD,
            "default": BakeProfile.EXACT, "compute": BakeProfile.EXACT,
            "compact": BakeProfile.SIZE, "quant": BakeProfile.SIZE}
_DESCRIPTIONS = {
    BakeProfile.MERGE: "package only: weights bound as constants, graph otherwise untouched",
    BakeProfile.FOLD: "fold weight-only math and clean up, keep dense matmuls",
    BakeProfile.EXACT: "lossless: skip zero matmuls, pack exact-ternary weights (TQ2_0), clean up",
    BakeProfile.SIZE: "exact + Q8_0 on matmul/conv/gather weights, f16 on other large "
                      "floats (lossy)",
    BakeProfile.FAST: "exact + a precision plan checked on --calibrate feeds: int8 (QDQ) "
                      "where every output keeps --min-cosine (default 0.999), f32 elsewhere",
}


@dataclass
class BakeOptions:
    """Every switch of the bake pipeline. The default is the exact profile."""

    profile: BakeProfile = BakeProfile.EXACT
    constant_folding: bool = True
    dce: bool = True
    algebraic_simplify: bool = True
    skip_zero: bool = True
    ternary: bool = True
    quant: bool = False
    precision_plan: bool = False  # the fast profile's int8 plan (rlx.baking.fast)
    unfold: bool = True
    memory: MemoryMode = MemoryMode.COMPACT
    dedupe_constants: bool = True
    keep_folded_bindings: bool = False
    # the accuracy guard of the lossy encodings (rlx.baking.guard): feeds to measure on,
    # and the targets every output must meet on them (cosine default 0.9995 when calibrating,
    # 0.999 for the fast profile's precision plan)
    calibration: Sequence[Mapping[str, np.ndarray]] | None = None
    min_cosine: float | None = None
    max_abs_error: float | None = None
    # the bundled self-test (rlx.baking.self_test): True (on the calibration feeds, else one
    # seeded sample) or the feed sets to store; False stores none
    self_test: bool | Sequence[Mapping[str, np.ndarray]] = False

    @classmethod
    def from_profile(cls, profile: BakeProfile | str) -> BakeOptions:
        if isinstance(profile, str):
            profile = BakeProfile.parse(profile)
        return cls(profile=profile, **_TABLE[profile])

    def replace(self, **changes) -> BakeOptions:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise BakeError(f"unknown bake option(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)


def _row(fold, skip, ternary, quant, memory, dedupe, keep_folded):
    return dict(constant_folding=fold, dce=fold, algebraic_simplify=fold, skip_zero=skip,
                ternary=ternary, quant=quant, unfold=True, memory=memory,
                dedupe_constants=dedupe, keep_folded_bindings=keep_folded)


_TABLE = {
    BakeProfile.MERGE: _row(False, False, False, False, MemoryMode.DUPLEX, False, True),
    BakeProfile.FOLD: _row(True, False, False, False, MemoryMode.COMPACT, True, False),
    BakeProfile.EXACT: _row(True, True, True, False, MemoryMode.COMPACT, True, False),
    BakeProfile.SIZE: _row(True, True, True, True, MemoryMode.COMPACT, True, False),
    BakeProfile.FAST: {**_row(True, True, True, False, MemoryMode.COMPACT, True, False),
                       "precision_plan": True},
}
