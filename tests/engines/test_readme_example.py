"""The README's engines example (after the Python API one, whose mlp.rlx it runs) works."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_engines_example(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    api = next(b for b in blocks if "write_rlx(\"mlp.rlx\"" in b)
    engines = next(b for b in blocks if "rlx.load(" in b)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    scope: dict = {}
    exec(compile(api, str(README), "exec"), scope)
    exec(compile(engines, str(README), "exec"), scope)
    assert scope["y"].shape == (2, 64) and (tmp_path / "mlp.onnx").exists()
    assert scope["model"].engine in ("numpy", "onnxruntime", "openvino")
