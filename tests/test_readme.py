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


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_every_python_block_runs_as_written(tmp_path, monkeypatch):
    blocks = _python_blocks()
    assert blocks, "README has no Python example"
    monkeypatch.chdir(tmp_path)
    for i, block in enumerate(blocks):
        exec(compile(block, f"{README}:python block {i}", "exec"), {})


def test_links_point_at_files_in_the_repo():
    root = README.parent
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if "://" not in target:
            assert (root / target).exists(), f"README links to {target}, which is not in the repo"
    for name in ("DESIGN.md", "MODELS.md"):  # they live outside the repo
        assert name not in README.read_text(), f"README refers to {name}, not in the repo"
