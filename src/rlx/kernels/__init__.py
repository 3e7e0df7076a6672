"""Kernels by op family; importing this package fills the registry."""

from rlx.kernels import (  # noqa: F401  (imported for their registrations)
    control,
    elementwise,
    linalg,
    multi,
    nn,
    quant,
    reduce,
    shaping,
)
from rlx.kernels.registry import BUILDERS, KERNELS, has_kernel

__all__ = ["BUILDERS", "KERNELS", "has_kernel"]
