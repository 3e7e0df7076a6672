"""The ONNX node conformance suite through the onnxruntime and OpenVINO engines: each case
imported, baked, written, then `rlx.load(path, engine=...)` and run (onnxruntime: the
float32 group; OpenVINO: the float32 common ops, to keep the run time reasonable; numpy
runs every case in test_conformance.py). Each engine has its own exact xfail table."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conformance.harness import load_cases, run_case
from tests.conformance.xfail import XFAIL
from tests.conformance.xfail_engines import TABLES

pytestmark = pytest.mark.slow

CASES = [(engine, case) for engine, (_, group) in TABLES.items()
         for case in load_cases() if group in case.groups and case.name not in XFAIL]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("conformance-engines")


@pytest.mark.parametrize(("engine", "case"), CASES, ids=lambda v: getattr(v, "name", v))
def test_node_case_through_engine(engine, case, workdir):
    if importlib.util.find_spec(engine) is None:
        pytest.fail(f"{engine} is not installed; `make test` installs it (rlx[dev])")
    failure = run_case(case, workdir, engine)
    reason = TABLES[engine][0].get(case.name)
    if reason is None:
        assert failure is None, failure
    elif failure is None:
        pytest.fail(f"{case.name} passes on {engine} but its table lists it ({reason})")
    else:
        pytest.xfail(reason)


@pytest.mark.parametrize("engine", sorted(TABLES))
def test_engine_tables_name_real_cases(engine):
    table, group = TABLES[engine]
    names = {c.name for c in load_cases() if group in c.groups and c.name not in XFAIL}
    assert not sorted(set(table) - names)
