"""Concurrency (concurrency.py): one CompiledGraph of each real model run from 8 threads
gives the serial results bit for bit; 4 processes mapping one artifact share its pages.

CI keeps 8 threads; silero-vad makes the full 200 calls per thread, ppocr-cls 50 and
minilm-l3 10 (its calls take ~40 ms alone, and 8 threads share 2 cores); `make fuzz` runs
8 x 200 for every model.
"""

from __future__ import annotations

import pytest

from tests.hardening import concurrency

CALLS = {"ppocr-cls": 50, "silero-vad": 200, "minilm-l3": 10}  # per thread, in CI


@pytest.mark.slow
@pytest.mark.parametrize("name", CALLS)
def test_eight_threads_match_a_serial_run(tmp_path, name):
    compiled = concurrency.compiled_model(name, tmp_path)
    assert concurrency.run_threads(compiled, name, threads=8, calls=CALLS[name]) == []


@pytest.mark.slow
def test_four_processes_share_the_pages_of_one_artifact(tmp_path):
    path = tmp_path / "shared.rlx"
    weights = concurrency.weights_artifact(path, 64)
    for child in concurrency.run_processes(path, 4):
        assert child["RssFile"] > 0.9 * weights  # the run touched every weight page...
        assert child["RssAnon"] < 0.1 * weights  # ...without copying them
        assert child["map_Rss"] > 0.9 * weights
        assert child["map_Pss"] < 0.5 * child["map_Rss"]  # 4 sharers: 1/4 each, ideally
