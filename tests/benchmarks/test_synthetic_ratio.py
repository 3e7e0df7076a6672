"""Smoke run of benchmarks/synthetic_ratio.py: every model it builds bakes, runs on the
numpy engine and agrees with onnxruntime (its max|diff| column), in the shortest run."""

from __future__ import annotations

import re

import pytest

from benchmarks.synthetic_ratio import MODELS, main


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_model_runs_and_agrees_with_onnxruntime(name, capsys):
    main([name, "--seconds", "0"])
    line = capsys.readouterr().out
    assert line.startswith(name) and "ratio" in line
    assert float(re.search(r"max\|diff\| (\S+)", line).group(1)) < 1e-5


def test_unknown_models_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["lstm-that-is-not-there"])
    assert "unknown model" in capsys.readouterr().err
