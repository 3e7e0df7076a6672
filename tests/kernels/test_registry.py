"""The kernel registry holds IR op types only (tests/test_op_coverage.py checks that every
op type has a kernel, or why it has none), and a family's kernels load with its ops."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlx.ir.ops import OPS
from rlx.ir.ops.base import FAMILY_OPS
from rlx.kernels import BUILDERS, KERNELS, WRITES_INTO


def test_the_registry_holds_only_ir_op_types():
    for op_type in {*KERNELS, *BUILDERS}:
        assert OPS.get(op_type.__name__) is op_type, f"{op_type} is not in rlx.ir.ops.OPS"


_FAMILY_ALONE = """
import sys
from rlx.ir.ops.base import FAMILY_OPS, op_type
from rlx.kernels.registry import BUILDERS, KERNELS, WRITES_INTO, has_kernel
for name in FAMILY_OPS[sys.argv[1]]:
    has_kernel(op_type(name))
print(*sorted(t.__name__ for t in {*KERNELS, *BUILDERS, *WRITES_INTO}
              if t.__module__ == "rlx.ir.ops." + sys.argv[1]))
"""


@pytest.mark.parametrize("family", sorted(FAMILY_OPS))
def test_a_familys_kernels_load_with_its_first_op(family):
    """`load_kernels` imports a family's kernel modules alone (a compile imports no other
    family's): what they register for the family is what the whole registry holds."""
    out = subprocess.run([sys.executable, "-c", _FAMILY_ALONE, family], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == sorted(t.__name__ for t in {*KERNELS, *BUILDERS, *WRITES_INTO}
                         if t.__module__ == f"rlx.ir.ops.{family}")
