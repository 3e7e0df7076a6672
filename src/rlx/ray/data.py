"""`rlx.ray.Predictor`: a baked model as a Ray Data batch function,

    ds.map_batches(rlx.ray.Predictor, fn_constructor_kwargs={"path": "model.rlx"},
                   concurrency=2, batch_size=64)

Ray Data hands each actor batches as dicts of numpy arrays, one row per example. Columns
named like the model's inputs feed it; the others pass through; one column per output is
added, in the batch's row order, in the output's own dtype. A model with a symbolic batch
dim (`rlx.ray.batching.batch_dim`) runs a whole batch in one call; any other runs row by
row, each row fed as the model declares it (a row of one rank less gets its batch axis of
1 back) and its outputs stacked. Nothing here imports Ray: a Predictor also runs on a plain
dict of arrays.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from rlx.engines.model import IoSpec, load
from rlx.errors import InputError
from rlx.ray.batching import batch_dim

__all__ = ["Predictor"]


class Predictor:
    """Loads `path` once per actor (`rlx.load(path, engine=..., threads=...)`, with
    `memory="shared"`: actors are workers mapping one file, so auto never picks an engine
    that copies the weights into each), then maps batches:
    `predictor({column: array}) -> {column: array}`."""

    def __init__(self, path: str | os.PathLike, *, engine: str = "auto",
                 threads: int | None = None, precision: str = "exact"):
        self.model = load(path, engine=engine, threads=threads, precision=precision,
                          memory="shared")
        self._inputs = self.model.inputs
        self._outputs = [spec.name for spec in self.model.outputs]
        self._whole = batch_dim(self._inputs) is not None

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [spec.name for spec in self._inputs if spec.name not in batch]
        if missing:
            raise InputError(f"{self.model.path}: the batch has no column(s) "
                             f"{', '.join(map(repr, missing))} for the model's input(s); its "
                             f"columns are {sorted(batch)}")
        clash = [name for name in self._outputs if name in batch]
        if clash:
            raise InputError(f"{self.model.path}: output(s) {', '.join(map(repr, clash))} "
                             f"would overwrite the batch's column(s) of that name; rename "
                             "them first (ds.rename_columns)")
        columns = {spec.name: np.asarray(batch[spec.name]) for spec in self._inputs}
        outputs = self.model.run(columns) if self._whole else self._by_row(columns)
        return {**batch, **dict(zip(self._outputs, outputs))}

    def _by_row(self, columns: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        rows = {c.shape[0] if c.ndim else -1 for c in columns.values()}
        if len(rows) != 1 or -1 in rows:
            shapes = ", ".join(f"{n} {list(c.shape)}" for n, c in columns.items())
            raise InputError(f"{self.model.path}: the input columns differ in rows "
                             f"({shapes})")
        (count,) = rows
        runs = [self.model.run({spec.name: _row(spec, columns[spec.name][i])
                                for spec in self._inputs}) for i in range(count)]
        if not runs:  # an empty batch: empty columns of the right dtypes
            return [np.empty((0, *(d if isinstance(d, int) else 0 for d in spec.shape)),
                             spec.dtype) for spec in self.model.outputs]
        return [np.stack(parts) for parts in zip(*runs)]


def _row(spec: IoSpec, row: np.ndarray) -> np.ndarray:
    """One row as the input takes it: as it is, or with the batch axis of 1 it lacks."""
    return row[np.newaxis] if row.ndim + 1 == len(spec.shape) else row
