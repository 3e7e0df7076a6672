"""Lazy packages (rlx._lazy): every exported name resolves, unknown names raise
AttributeError, and loading or reading a model does not import what it does not use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

LAZY_PACKAGES = ["rlx", "rlx.passes", "rlx.weights"]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_export_resolves(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) - {"__version__"} <= set(dir(module))


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_unknown_names_raise_attribute_error(package):
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        getattr(importlib.import_module(package), "nope")  # noqa: B009  (the lookup is the test)


def _imported_after(code: str) -> set[str]:
    """Module names a fresh interpreter has imported after running `code`."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(*sys.modules)"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


HEAVY = {"onnx", "gguf", "rlx.baking.pipeline", "rlx.weights.load", "rlx.passes.constant_folding",
         "rlx.frontends.onnx"}


def test_import_rlx_imports_nothing_heavy():
    loaded = _imported_after("import rlx")
    assert not loaded & (HEAVY | {"numpy", "rlx.runtime", "rlx.artifact"})


def test_reading_and_running_does_not_import_the_bake_or_onnx():
    loaded = _imported_after("from rlx import read_rlx, Session")
    assert {"rlx.artifact.reader", "rlx.runtime.session"} <= loaded
    assert not loaded & HEAVY


def test_every_name_means_one_thing():
    """No module shares its name with what its package exports: `import rlx.baking` keeps
    `rlx.bake` the function and gives the package's own names (issue 17)."""
    code = ("import rlx.baking, rlx.passes.constant_folding, rlx.artifact\n"
            "print(callable(rlx.bake), rlx.baking.BakeOptions.__name__,"
            " callable(rlx.passes.fold_constants), rlx.relayout is rlx.artifact.relayout)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["True", "BakeOptions", "True", "True"]
