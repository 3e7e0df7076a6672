"""The numpy engine: rlx's own runtime (`CompiledGraph`), the reference every engine is
tested against. Feeds arrive checked, so a run is `CompiledGraph.call` in graph order."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np

from rlx.artifact.model import RlxFile
from rlx.engines.cores import threads_that_fit
from rlx.ir.graph import Graph
from rlx.runtime.inline import inline_composites
from rlx.runtime.session import CompiledGraph

__all__ = ["NumpyRunner", "build"]


class NumpyRunner:
    name = "numpy"
    private_weight_bytes = 0  # kernels read the weights from the artifact's map

    def __init__(self, graph: Graph, threads: int | None, precision: str = "exact"):
        start = time.perf_counter()
        self.compiled = CompiledGraph(inline_composites(graph))
        self.compile_seconds = time.perf_counter() - start  # `rlx-bake run` reports it
        self.precision = precision
        self.threads = threads_that_fit(threads)  # fewer when the cores are shared (`cores`)
        self._pools: list | None = None if self.threads is not None else []
        self._order = self.compiled.input_names
        self._names = self.compiled.output_names
        self._index = {name: k for k, name in enumerate(self._names)}

    @property
    def pools(self) -> list:
        """The thread pools (BLAS, OpenMP) a run sets to `threads`, found on first use:
        threadpoolctl, with the dataclasses and threading it imports, is 0.76 MiB of code
        and classes, which a load on a busy machine (where the threads are cut) would
        otherwise add to the 2% of the weights it may grow by (issue 35)."""
        if self._pools is None:
            import threadpoolctl

            self._pools = threadpoolctl.ThreadpoolController().lib_controllers
        return self._pools

    def run(self, feeds: dict[str, np.ndarray], outputs: Sequence[str]) -> list[np.ndarray]:
        args = [feeds[name] for name in self._order]
        # process-wide while the run lasts (numpy's BLAS has one pool), set and put back
        # only where it differs: threadpoolctl's limit context cost 24-80 us a run, a tenth
        # or more of a 0.2 ms model's; reading a pool's count costs ~0.3 us
        changed = [(pool, count) for pool in self.pools
                   if (count := pool.get_num_threads()) != self.threads]
        for pool, _ in changed:
            pool.set_num_threads(self.threads)
        try:
            values = self.compiled.call(*args)
        finally:
            for pool, count in changed:
                pool.set_num_threads(count)
        if outputs == self._names:  # all of them, in graph order: the everyday call
            return values
        return [values[self._index[name]] for name in outputs]


def build(file: RlxFile, graph: Graph, path: str | None, *, threads: int | None,
          precision: str, cache_dir: str | os.PathLike | None = None,
          prepack: str = "mapped", memory: str = "private") -> NumpyRunner:
    """`cache_dir`, `prepack` and `memory` are unused: this engine keeps nothing on disk
    and computes on the map. numpy has no faster precision of its own: "fast" runs exact,
    except a fast file's plan, whose numerics it computes (QDQ op by op)."""
    plan = file.precision_plan
    label = plan.label if plan is not None and precision == "fast" else "exact"
    return NumpyRunner(graph, threads, label)
