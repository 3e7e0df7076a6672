"""The kernel registry holds IR op types only (tests/test_op_coverage.py checks that every
op type has a kernel, or why it has none)."""

from __future__ import annotations

from rlx.ir.ops import OPS
from rlx.kernels import BUILDERS, KERNELS


def test_the_registry_holds_only_ir_op_types():
    for op_type in {*KERNELS, *BUILDERS}:
        assert OPS.get(op_type.__name__) is op_type, f"{op_type} is not in rlx.ir.ops.OPS"
