"""The README's Python example runs as written (docs that drift are worse than none)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_api_example_runs(tmp_path, monkeypatch):
    block = re.search(r"## Python API\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert block, "README has no Python API example"
    monkeypatch.chdir(tmp_path)  # it writes mlp.rlx
    scope: dict = {}
    exec(compile(block.group(1), str(README), "exec"), scope)
    assert scope["y"].shape == (2, 64) and (scope["y"] >= 0).all()  # relu
    assert scope["profile"].runs == 20 and (tmp_path / "mlp.rlx").exists()
