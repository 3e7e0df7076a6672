"""The artifact's modules import one way: `model` (RlxFile and its methods) uses `memory`,
`tensors` and `weight_row`; none of those imports `model`, not even for type checking."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rlx.artifact

ARTIFACT = Path(rlx.artifact.__file__).parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize("module", ["memory", "tensors", "weight_row"])
def test_the_helpers_of_rlxfile_never_import_it(module):
    imported = _imports(ARTIFACT / f"{module}.py")
    assert "rlx.artifact.model" not in imported


def test_the_seed_function_spellings_are_the_methods():
    from rlx import into_runtime_graph, materialize_weights
    from rlx.artifact import RlxFile, apply_memory_mode, relayout

    assert into_runtime_graph is RlxFile.into_runtime_graph
    assert materialize_weights is RlxFile.materialize_weights
    assert (apply_memory_mode, relayout) == (RlxFile.apply_memory_mode, RlxFile.relayout)
