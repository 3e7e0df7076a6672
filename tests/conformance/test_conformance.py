"""The ONNX backend node tests, each through import -> bake -> write -> read -> run.

One test per case: it must pass, or fail with the reason `xfail.XFAIL` gives it (a listed
case that passes is an error too, so the table stays exact). `test_rates_hold_the_ratchet`
checks the pass rates the table implies against `ratchet.json` and the fixed floors.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conformance.harness import GROUPS, load_cases, rates, run_case
from tests.conformance.xfail import XFAIL

pytestmark = pytest.mark.slow

RATCHET = Path(__file__).with_name("ratchet.json")
FLOORS = {"float32_common": 1.0, "float32": 0.955}
"""Rates that may never be recorded lower (the issue's floor)."""

CASES = load_cases()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("conformance")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_node_case(case, workdir):
    failure = run_case(case, workdir)
    reason = XFAIL.get(case.name)
    if reason is None:
        assert failure is None, failure
    elif failure is None:
        pytest.fail(f"{case.name} passes but XFAIL lists it ({reason}): delete the entry")
    else:
        pytest.xfail(reason)


def test_xfail_table_names_real_cases():
    unknown = sorted(set(XFAIL) - {c.name for c in CASES})
    assert not unknown, f"XFAIL lists cases the suite does not have: {unknown}"


def test_rates_hold_the_ratchet():
    """The table fixes which cases fail (the per-case tests enforce it), hence the rates."""
    recorded = json.loads(RATCHET.read_text())
    assert set(recorded) == set(GROUPS)
    for group, (passed, total) in rates(set(XFAIL)).items():
        best = recorded[group]["passed"] / recorded[group]["total"]
        floor = max(FLOORS.get(group, 0.0), best)
        assert passed / total >= floor, (f"{group}: {passed}/{total} = {passed / total:.4f} "
                                         f"fell below {floor:.4f}")
