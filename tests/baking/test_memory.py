"""The memory-layout module: the seed's tests and the fixes we promised over it."""

from __future__ import annotations

import numpy as np
import pytest

from rlx import (
    BakeOptions,
    BakeProfile,
    MemoryMode,
    bake,
    ensure_runtime_ready,
)
from rlx.artifact import (
    strip_table_weight_bytes,
)
from rlx.errors import ArtifactError
from rlx.ir import Constant
from tests.baking.models import mlp_graph, mlp_weights, mul_graph

W = {"w": np.array([1, 2, 3, 4], np.float32)}


def _bake(memory, graph=None, weights=W, profile=BakeProfile.EXACT):
    return bake(graph or mul_graph(), weights,
                BakeOptions.from_profile(profile).replace(memory=memory))


def _constant_bytes(graph):
    return sum(n.op.nbytes for n in graph.nodes() if isinstance(n.op, Constant))


def test_compact_strips_and_materializes():
    file, report = _bake(MemoryMode.COMPACT)
    assert file.needs_materialize()
    assert sum(w.nbytes for w in file.weights) > 0
    assert _constant_bytes(file.graph) == 0 and report.memory.graph_bytes_stripped == 16
    filled = file.materialize_weights()
    assert filled == 16 and not file.needs_materialize()


def test_runtime_strips_table():
    file, report = _bake(MemoryMode.RUNTIME)
    assert not file.needs_materialize()
    assert all(w.nbytes == 0 for w in file.weights)
    assert all("[metadata-only]" in w.note for w in file.weights)
    assert report.memory.table_bytes_stripped > 0 and file.meta.weight_bytes == 0


def test_duplex_keeps_both():
    file, report = _bake(MemoryMode.DUPLEX)
    assert _constant_bytes(file.graph) == 16 and file.meta.weight_bytes == 16
    assert report.memory.graph_bytes_stripped == report.memory.table_bytes_stripped == 0


def test_materialize_shares_the_table_bytes():
    file, _ = _bake(MemoryMode.COMPACT)
    file.materialize_weights()
    node = file.graph.node(file.weight("w").node_id)
    assert np.shares_memory(node.op.data, file.weight("w").data)


def test_strip_table_is_idempotent_on_notes():
    file, _ = _bake(MemoryMode.DUPLEX)
    rows, n = strip_table_weight_bytes(file.weights)
    rows, m = strip_table_weight_bytes(rows)
    assert (n, m) == (16, 0) and rows[0].note.count("[metadata-only]") == 1


def test_rows_link_by_node_not_by_name():
    """Inventory 9.4: a same-named dead node must not receive another node's bytes."""
    file, _ = _bake(MemoryMode.COMPACT, mlp_graph(), mlp_weights())
    for row in file.weights:
        if row.node_id is not None:
            assert file.graph.node(row.node_id).name == row.name
    file.materialize_weights()
    for row in file.weights:
        node = file.graph.node(row.node_id)
        assert node.op.nbytes == row.nbytes


def test_ensure_runtime_ready_reports_a_missing_table():
    file, _ = _bake(MemoryMode.COMPACT)
    file.weights = []
    with pytest.raises(ArtifactError, match="still has 1 empty Constant"):
        ensure_runtime_ready(file)


def test_drop_table_after_materialize_keeps_the_graph_runnable():
    file, _ = _bake(MemoryMode.COMPACT)
    graph = file.into_runtime_graph()
    assert file.drop_weight_table_data() == 16
    assert _constant_bytes(graph) == 16
