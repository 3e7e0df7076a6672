"""Kernels by op family; importing this package fills the registry."""

from rlx.kernels import (  # noqa: F401  (imported for their registrations)
    control,
    elementwise,
    integer,
    linalg,
    multi,
    nn,
    packed,
    qlinear,
    quant,
    reduce,
    shaping,
)
from rlx.kernels.registry import BUILDERS, KERNELS, WRITES_INTO, has_kernel

__all__ = ["BUILDERS", "KERNELS", "WRITES_INTO", "has_kernel"]
