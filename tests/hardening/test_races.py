"""The race harness (tests/hardening/race.py) at small counts: every surface keeps the
contract while a second process renames, swaps, truncates and moves its file. `make fuzz`
(scripts/fuzz.py) runs each surface 1,000 times."""

from __future__ import annotations

import importlib.util

import pytest

from tests.hardening.race import SURFACES, race

# loads per surface here (CPU: see docs/reliability.md; the engine builds cost the most)
COUNTS = {"load": 200, "signature": 200, "onnxruntime-save": 100, "onnxruntime-off": 100,
          "encrypted": 40, "auto-cache": 30, "openvino": 40}
NEEDS = {"onnxruntime-save": "onnxruntime", "onnxruntime-off": "onnxruntime",
         "encrypted": "onnxruntime", "auto-cache": "onnxruntime", "openvino": "openvino"}


@pytest.mark.parametrize("surface", list(SURFACES))
def test_a_second_process_renaming_files_never_breaks_the_contract(surface):
    module = NEEDS.get(surface)
    if module is not None:  # part of rlx[dev]: a missing one is a broken set-up
        assert importlib.util.find_spec(module), f"{module} missing: pip install -e '.[dev]'"
    report = race(surface, COUNTS[surface], seed=1)
    assert not report.violations, report.as_dict()
    assert sum(report.swaps.values()) > 0, "the second process never ran"
    assert sum(report.outcomes.values()) == COUNTS[surface]
