"""Helpers shared by the pass tests: snapshots (the input graph must not change) and runs."""

from __future__ import annotations

import numpy as np

from rlx.ir import Graph, verify
from rlx.ir.ops.sources import Constant
from rlx.runtime import Session


def snapshot(graph: Graph) -> tuple:
    """Everything a pass could mutate: node objects, outputs and constant bytes."""
    payloads = [bytes(n.op.data) for n in graph.nodes() if isinstance(n.op, Constant)]
    return list(graph.nodes()), list(graph.outputs), payloads, graph.name


def assert_unchanged(graph: Graph, before: tuple) -> None:
    nodes, outputs, payloads, name = snapshot(graph)
    assert len(nodes) == len(before[0]) and all(a is b for a, b in zip(nodes, before[0]))
    assert (outputs, payloads, name) == before[1:]


def checked(pass_fn, graph: Graph, *args):
    """Run a pass; assert it left its input alone and its output verifies."""
    before = snapshot(graph)
    new, count = pass_fn(graph, *args)
    assert_unchanged(graph, before)
    verify(new)
    assert (new is graph) == (count == 0)
    return new, count


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        n.op.name: rng.standard_normal(n.shape.dims).astype(n.shape.dtype.numpy)
        for n in graph.inputs()
    }


def run(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return Session().compile(graph).run(feeds)


def assert_same_results(before: Graph, after: Graph, seed: int = 0) -> None:
    """Both graphs give bit-identical outputs (NaN in the same places) on random inputs."""
    feeds = random_feeds(before, seed)
    for a, b in zip(run(before, feeds), run(after, feeds), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def ops_of(graph: Graph) -> list[str]:
    return [type(n.op).__name__ for n in graph.nodes()]
