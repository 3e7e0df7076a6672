"""Packaging: runtime dependencies are exactly what src/ imports, the version lives in one
place, and the package ships `py.typed`."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import rlx
from rlx.version import __version__

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "rlx"
PYPROJECT = (ROOT / "pyproject.toml").read_text()
# import name -> distribution name, where they differ
DISTRIBUTION = {"argon2": "argon2-cffi", "google": "protobuf", "gguf": "gguf"}


def _third_party_imports() -> set[str]:
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "rlx"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _requirements() -> tuple[set[str], dict[str, set[str]]]:
    """The installed rlx's runtime requirements, and its extras' (from its metadata)."""
    runtime: set[str] = set()
    extras: dict[str, set[str]] = {}
    for requirement in metadata.requires("rlx") or []:
        extra = re.search(r"extra == ['\"]([^'\"]+)['\"]", requirement)
        if extra:
            extras.setdefault(extra.group(1), set()).add(_name(requirement))
        else:
            runtime.add(_name(requirement))
    return runtime, extras


def test_runtime_dependencies_are_what_src_imports():
    imported = {DISTRIBUTION.get(m, m).lower().replace("_", "-") for m in
                _third_party_imports()}
    runtime, extras = _requirements()
    # an optional engine or integration is imported only when asked for, and installed by
    # its extra; the dev extra (what `make test` installs) has them all
    # (model-signing 1.1 imports pyopenssl without declaring it: the signing extra does)
    optional = extras["openvino"] | extras["ray"] | (extras["signing"] - {"pyopenssl"})
    assert runtime == imported - optional and optional <= imported
    assert optional <= extras["dev"]
    # safetensors is only a test oracle (rlx reads and writes the format itself)
    assert "safetensors" in extras["dev"] and "safetensors" not in runtime


def test_version_comes_from_one_place():
    assert re.search(r'^dynamic = \["version"\]$', PYPROJECT, re.M)
    assert 'version = { attr = "rlx.version.__version__" }' in PYPROJECT
    assert rlx.__version__ == __version__ == metadata.version("rlx") == "0.2.0"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {__version__}" in changelog


@pytest.mark.slow
def test_the_wheel_ships_py_typed(tmp_path):
    assert (SRC / "py.typed").is_file()
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w",
                           str(tmp_path), str(ROOT)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("rlx-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "rlx/py.typed" in names and f"rlx-{__version__}.dist-info/METADATA" in names
    metadata = zipfile.ZipFile(wheel).read(f"rlx-{__version__}.dist-info/METADATA").decode()
    assert "Requires-Dist: safetensors" not in metadata.split("Provides-Extra")[0]
