"""Dedupe: constants with identical dtype, shape and bytes collapse into the first copy.

The key is (dtype, dims, blake2b digest of the bytes), confirmed by a byte compare when
digests match, so the pass reads each payload once or twice: O(total bytes), and no copy of
any payload is held. The first copy keeps its node and name; later copies are left out and
their readers (and graph outputs) point at the first (their names go with them). Stripped
constants (no bytes) are never merged: their content is unknown.

Deferred constants (`rlx.deferred`) are keyed on their fingerprints: a weight read from a
file on its bytes' hash, an encoded or folded one on its recipe (function, parameters and
the fingerprints of its inputs), so two encodings of one weight merge without either
being computed. A deferred and a plain constant never merge.
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np

from rlx.deferred import Deferred, Payload
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.sources import Constant
from rlx.ir.rewrite import Rewriter

__all__ = ["constant_key", "dedupe_identical_constants", "same_constant"]

log = logging.getLogger(__name__)


def dedupe_identical_constants(graph: Graph) -> tuple[Graph, int]:
    """Point every duplicate constant's readers at its first copy; returns (graph, merged)."""
    rw = Rewriter(graph)
    kept: dict[tuple, list[int]] = {}  # key -> new ids of the distinct payloads with it
    merged = 0
    for node in graph.nodes():
        op = node.op
        if not isinstance(op, Constant) or op.is_stripped:
            rw.copy(node)
            continue
        same_key = kept.setdefault(constant_key(node), [])
        original = next((k for k in same_key if same_constant(rw.target.node(k), node)), None)
        if original is None:
            same_key.append(rw.copy(node))  # a digest collision keeps both copies
            continue
        rw.replace(node.id, original)
        merged += 1
        log.debug("dedupe: %s has the bytes of %s; merged into it", node.label,
                  rw.target.node(original).label)
    log.info("dedupe %r: %d duplicate constant(s) merged", graph.name, merged)
    return rw.finish(), merged


def constant_key(node: Node) -> tuple:
    """What identical constants share: dtype, dims and a digest of the bytes (or of the
    deferred recipe); equal keys are confirmed with `same_constant`."""
    assert isinstance(node.op, Constant)
    return node.tensor_shape.dtype, node.tensor_shape.dims, _digest(node.op.data)


def _digest(data: Payload) -> tuple[str, bytes]:
    if isinstance(data, Deferred):
        return type(data).__name__, data.fingerprint()
    return "bytes", hashlib.blake2b(data.data, digest_size=16).digest()


def same_constant(a: Node, b: Node) -> bool:
    """Whether two constants of one `constant_key` hold the same bytes."""
    assert isinstance(a.op, Constant) and isinstance(b.op, Constant)
    x, y = a.op.data, b.op.data
    if isinstance(x, Deferred) and isinstance(y, Deferred):
        return x.same(y)
    return not isinstance(x, Deferred) and not isinstance(y, Deferred) \
        and bool(np.array_equal(x, y))
