"""docs/architecture.md, "Layers and their allowed imports": which rlx module may import which.
Parsed with `ast`, not executed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rlx"

# module -> rlx modules it may import (itself always allowed)
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "version": set(),
    "ir": {"errors", "codecs", "enums", "payload", "_lazy", "record"},
    "codecs": {"errors", "enums", "record", "_lazy"},
    "kernels": {"errors", "ir", "codecs", "record"},
    "runtime": {"errors", "ir", "codecs", "kernels", "_lazy", "record"},
    "passes": {"errors", "ir", "codecs", "kernels", "_lazy", "deferred"},
    "weights": {"errors", "codecs", "enums", "_lazy", "safeio", "stored_zip", "deferred"},
    "stored_zip": {"errors"},  # STORE-only zip archives: .rlxp zip packages, .dduf bundles
    "enums": set(),
    "artifact": {"errors", "ir", "codecs", "enums", "version", "safeio", "stored_zip", "_lazy",
                 "deferred", "payload", "record"},
    # baking: bake_file reads a model file through frontends (which never import baking)
    "baking": {"errors", "ir", "codecs", "kernels", "runtime", "passes", "weights", "artifact",
               "enums", "deferred", "frontends"},
    # frontends: load_model tells a model from an artifact by its first bytes (artifact.sniff),
    # reads graph JSON / bundles itself and ONNX through rlx.onnx
    "frontends": {"errors", "ir", "kernels", "codecs", "enums", "version", "_lazy", "safeio",
                  "artifact", "onnx"},
    # rlx.onnx: ONNX import and export, the only package that imports onnx
    "onnx": {"errors", "ir", "kernels", "codecs", "enums", "version", "_lazy", "safeio"},
    # engines: rlx.load / Model over numpy, onnxruntime, openvino (never passes or baking)
    "engines": {"errors", "ir", "codecs", "kernels", "runtime", "artifact", "frontends", "onnx",
                "safeio", "version", "_lazy", "logs", "record"},
    # rlx.ray: Ray Serve deployment and Ray Data predictor over rlx.load (beside the CLI)
    "ray": {"errors", "engines", "artifact", "weights", "_lazy", "safeio"},
    "models": {"ir"},
    "demo": {"engines", "baking", "artifact", "models"},
    # the rlx-bake command (package rlx.cli): thin commands over the library, may import it all
    "cli": {"errors", "version", "enums", "ir", "codecs", "kernels", "runtime", "passes",
            "weights", "artifact", "baking", "frontends", "onnx", "engines", "ray", "demo",
            "models", "safeio", "stored_zip", "record", "logs", "deferred", "_lazy"},
    "__main__": {"cli"},
    "__init__": {"errors", "ir", "codecs", "kernels", "runtime", "passes", "weights", "baking",
                 "artifact", "frontends", "onnx", "version", "_lazy", "engines"},
    "_lazy": set(),
    "safeio": {"errors", "record", "logs"},  # bounded JSON, regular files, leased maps
    "record": set(),  # dataclasses without their class-creation cost (the load path's)
    "logs": set(),  # loggers that import logging only once a record can be seen
    "deferred": {"errors", "safeio", "payload"},  # arrays read or computed when used (bake)
    "payload": set(),  # what a constant holds: an array or a Deferred one (the load path's)
}
ONNX_IMPORTERS = {"onnx"}


def _module_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """Modules `path` imports: import statements, and the modules a lazy package's `_LAZY`
    table names (rlx._lazy), which it imports on first use."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            names.update(c.value for c in ast.walk(node.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)
                         and c.value.startswith("rlx."))
    return names


SOURCES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_layering(path: Path):
    module = _module_of(path)
    assert module in ALLOWED, (f"{module} is not in the layering table: add it here and to "
                               "docs/architecture.md")
    for name in _imports(path):
        top, _, rest = name.partition(".")
        if top == "onnx" or name.startswith("onnx."):
            assert module in ONNX_IMPORTERS, f"{path.name}: only rlx.onnx may import onnx"
        if top != "rlx" or not rest:
            continue
        target = rest.split(".")[0]
        assert target == module or target in ALLOWED[module], (
            f"{path.relative_to(SRC)} imports rlx.{target}; {module} may import only "
            f"{sorted(ALLOWED[module])}"
        )


def test_nothing_imports_cli():
    for path in SOURCES:
        if _module_of(path) in ("cli", "__main__"):
            continue
        assert not any(n == "rlx.cli" for n in _imports(path)), f"{path} imports rlx.cli"
