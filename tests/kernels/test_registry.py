"""Every op type the IR knows runs: it has a kernel or a builder, or it is a source."""

from __future__ import annotations

import pytest

from rlx.ir.ops import OPS, Constant, Input, Param
from rlx.kernels import BUILDERS, KERNELS, has_kernel

SOURCES = {Input, Param, Constant}  # values fed, bound or stored: nothing to compute


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_type_has_a_kernel_or_is_a_source(name):
    op_type = OPS[name]
    assert has_kernel(op_type) != (op_type in SOURCES), (
        f"{name}: " + ("a source has no kernel" if op_type in SOURCES else
                       "no kernel: register one in rlx/kernels (@kernel, @staged or @builder)"))


def test_the_registry_holds_only_ir_op_types():
    for op_type in {*KERNELS, *BUILDERS}:
        assert OPS.get(op_type.__name__) is op_type, f"{op_type} is not in rlx.ir.ops.OPS"
