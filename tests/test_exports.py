"""Every name has one meaning: literal `__all__` lists, no star imports (but in the two op
packages, which take each op family's list), and the names the top-level `rlx` package
exports (its stable API) keep resolving."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import rlx

SRC = Path(__file__).resolve().parents[1] / "src" / "rlx"
SOURCES = sorted(p for p in SRC.rglob("*.py") if p.name != "__main__.py")

# The stable public API: removing or renaming one of these breaks users (say so in the
# CHANGELOG and keep the old name working); adding one means adding it here.
STABLE_API = {
    "BakeOptions", "BakeProfile", "BakeReport", "CompiledGraph", "DType", "Graph", "IoSpec",
    "MemoryMode", "MemoryStats", "Model", "RlxError", "RlxFile", "RlxIo", "RlxMeta", "RlxWeight",
    "RlxpOptions", "Session", "Shape", "__version__", "apply_memory_mode", "bake", "bake_bundle",
    "bake_file", "dedupe_identical_constants", "drop_weight_table_data", "ensure_runtime_ready",
    "export_onnx", "generate_keypair", "import_onnx", "into_runtime_graph", "load",
    "load_weights", "materialize_weights", "needs_materialize", "open_artifact", "read_rlx",
    "read_rlxp", "relayout", "save_keypair", "sign_artifact", "strip_graph_weight_bytes",
    "strip_table_weight_bytes", "verify_signature", "write_rlx", "write_rlxp",
}

OP_PACKAGES = {"rlx.ir", "rlx.ir.ops"}
"""Packages whose op names are the op families' own `__all__` lists (`rlx.ir.ops.FAMILIES`),
star-imported rather than written again (a new op is declared in its family alone)."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _literal_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "__all__":
            value = node.value
            ok = isinstance(value, (ast.List, ast.Tuple)) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)
            assert ok, "__all__ must be a literal list of strings"
            return [e.value for e in value.elts]
    return None


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_every_module_lists_its_names_and_imports_by_name(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    stars = [n.module for n in ast.walk(tree)
             if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]
    module = importlib.import_module(_module_name(path))
    if module.__name__ in OP_PACKAGES:
        strays = [s for s in stars if s.rpartition(".")[0] != "rlx.ir.ops"]
        assert not strays, f"star import from {strays}: only op families are star-imported"
        names = list(module.__all__)
    else:
        assert not stars, f"star import from {stars}: import the names"
        names = _literal_all(tree)
        assert names is not None, "no __all__: list the module's public names"
    assert len(set(names)) == len(names), "a name is listed twice"
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"__all__ names what the module does not have: {missing}"


def test_the_op_packages_export_every_family_and_every_op():
    """A new family module is in `FAMILIES` (and in rlx.ir's star imports for type checkers);
    a new op class is in its family's `__all__`."""
    import rlx.ir
    import rlx.ir.ops

    modules = {m.name for m in pkgutil.iter_modules(rlx.ir.ops.__path__)}
    assert {f.__name__.rpartition(".")[2] for f in rlx.ir.ops.FAMILIES} == modules
    typed = {n.module for n in ast.walk(ast.parse((SRC / "ir" / "__init__.py").read_text()))
             if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)}
    assert typed == {f.__name__ for f in rlx.ir.ops.FAMILIES}, "rlx.ir: star-import each family"
    declared = [name for family in rlx.ir.ops.FAMILIES for name in family.__all__]
    assert rlx.ir.ops.__all__ == declared
    assert set(declared) <= set(rlx.ir.__all__) and set(declared) <= set(dir(rlx.ir))
    for name, op_type in rlx.ir.ops.OPS.items():
        family = importlib.import_module(op_type.__module__)
        assert name in family.__all__, f"{name}: list it in {family.__name__}.__all__"
        assert getattr(rlx.ir, name) is getattr(rlx.ir.ops, name) is op_type


def test_the_family_index_names_each_familys_ops():
    """Reading a graph imports an op's family by `FAMILY_OPS` (rlx.ir.ops.base): it lists
    exactly the ops each family module defines."""
    import rlx.ir.ops
    from rlx.ir.ops.base import FAMILY_OPS

    defined: dict[str, set[str]] = {}
    for name, op_type in rlx.ir.ops.OPS.items():
        package, _, family = op_type.__module__.rpartition(".")
        if package == "rlx.ir.ops":  # not a test's own op class
            defined.setdefault(family, set()).add(name)
    listed = {family: set(names) for family, names in FAMILY_OPS.items()}
    assert listed == defined, "list each new op in rlx.ir.ops.base.FAMILY_OPS"


def test_the_stable_api_is_what_rlx_exports_and_every_name_resolves():
    assert set(rlx.__all__) == STABLE_API
    # every name rlx loads lazily is exported: none is reachable as rlx.X yet left unlisted
    assert set(rlx._LAZY) | {"__version__"} == STABLE_API
    for name in STABLE_API:
        assert getattr(rlx, name) is not None
    # by where they live, not identity: other tests may re-import modules
    assert rlx.bake.__module__ == "rlx.baking.pipeline"
    assert rlx.BakeOptions.__module__ == "rlx.baking.options"


def test_the_bake_package_is_baking_and_rlx_bake_is_the_function():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("rlx.bake")
    baking = importlib.import_module("rlx.baking")
    assert callable(rlx.bake) and rlx.bake.__name__ == baking.bake.__name__ == "bake"
    assert baking.BakeOptions.__module__ == rlx.BakeOptions.__module__ == "rlx.baking.options"
