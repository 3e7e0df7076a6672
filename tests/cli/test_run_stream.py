"""`rlx-bake run --stream FEEDS.npz`: a sequence through `Model.stream()` from the command
line, against the float64 loop written out by hand (tests/engines/test_stream.py's cell)."""

from __future__ import annotations

import numpy as np

from tests.cli.conftest import assert_error
from tests.engines.test_stream import XS, by_hand, write_cell


def test_a_sequence_runs_with_its_state_fed_back(cli, tmp_path):
    model, feeds, out = write_cell(tmp_path / "cell.rlx"), tmp_path / "xs.npz", tmp_path / "o.npz"
    np.savez(feeds, x=XS)
    result = cli("run", model, "--stream", feeds, "--output", out)
    assert result.code == 0, result.err
    assert "stacked over 12 steps" in result.out and "state hn -> h0" in result.out
    want, last = by_hand(XS, np.zeros((1, 4)))
    with np.load(out) as saved:
        assert saved.files == ["y", "hn"]
        np.testing.assert_allclose(saved["y"], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(saved["hn"][-1], last, rtol=1e-5, atol=1e-6)
    d = cli("run", model, "--stream", feeds, "--engine", "onnxruntime", "--json").json()
    assert d["stream"]["steps"] == 12 and d["stream"]["pairs"] == {"hn": "h0"}
    assert [o["shape"] for o in d["outputs"]] == [[12, 1, 4], [12, 1, 4]]


def test_stream_usage_and_errors(cli, tmp_path):
    model, feeds = write_cell(tmp_path / "cell.rlx"), tmp_path / "xs.npz"
    np.savez(feeds, x=XS)
    assert_error(cli("run", model, "--stream", feeds, "--repeat", "3"),
                 "--stream runs its sequence once; drop --repeat/--profile-ops", code=2)
    np.savez(feeds, x=XS[0])
    assert_error(cli("run", model, "--stream", feeds), "nothing to step over")
