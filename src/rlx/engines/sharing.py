"""`memory="shared"`: which engines hold a copy of the weights in every worker process.

N workers that load one `.rlx` map the same file, so weights an engine computes on where
they lie sit once in the page cache for all of them; weights it copies at load cost N
copies. Each runner says how many weight bytes it copied (`private_weight_bytes`: the
numpy engine none, onnxruntime those handed over as copies or prepacked on its heap,
OpenVINO the Constants its CPU plugin re-lays out, such as Conv weights). With the hint,
`auto` leaves out an engine that copies over `SHARED_LIMIT` of the weights, and an engine
asked for by name is loaded but warned about. Measurements: docs/engines.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlx.ir.ops.sources import Constant
from rlx.logs import Logger

if TYPE_CHECKING:
    from rlx.engines.model import Runner
    from rlx.ir.graph import Graph

__all__ = ["SHARED_LIMIT", "weight_bytes", "copies_weights", "warn_if_copied"]

log = Logger("rlx.engines")

SHARED_LIMIT = 0.05  # of the graph's weight bytes, copied per worker


def weight_bytes(graph: Graph) -> int:
    """Bytes of the graph's constants: what every worker would hold if it copied them."""
    return sum(n.op.nbytes for n in graph.nodes() if isinstance(n.op, Constant))


def copies_weights(runner: Runner, graph: Graph) -> bool:
    """The runner holds a private copy of over `SHARED_LIMIT` of the graph's weights."""
    return runner.private_weight_bytes > SHARED_LIMIT * weight_bytes(graph)


def warn_if_copied(runner: Runner, graph: Graph, path: str) -> None:
    """For an engine chosen by name under `memory="shared"`: say what each worker copies."""
    if copies_weights(runner, graph):
        log.warning("%s: memory='shared' but %s holds %.1f MiB of the %.1f MiB of weights in "
                    "each worker process; numpy and onnxruntime share them", path,
                    runner.name, runner.private_weight_bytes / 2**20,
                    weight_bytes(graph) / 2**20)
