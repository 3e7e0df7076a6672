"""Many requests' feeds as few model calls (Serve's dynamic batching), with no Ray in it.

A model batches when its inputs share one symbolic first dim that no other axis uses
(`batch_dim`): requests whose feeds have the same names, dtypes and shapes past axis 0 then
join along axis 0 into one call, and each output, whose first dim comes back as the total,
is cut back into the requests' rows. Rows are assumed independent, as by every dynamic
batcher. Anything else runs one request at a time: a model without such a dim, a request
that fits no group, and every request of a group whose joined call failed (so a bad feed
gets its own error and the others their answers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rlx.engines.model import IoSpec

__all__ = ["Outcome", "batch_dim", "run_batch"]

Outcome = list[np.ndarray] | Exception
"""One request's result: its outputs in graph order, or the error it gets."""
Run = Callable[[Mapping[str, Any]], list[np.ndarray]]


def batch_dim(inputs: Sequence[IoSpec]) -> str | None:
    """The symbolic dim every input starts with and no other axis uses, if there is one."""
    firsts = {spec.shape[0] if spec.shape else None for spec in inputs}
    if len(firsts) != 1:
        return None
    (dim,) = firsts
    if not isinstance(dim, str) or dim == "?":
        return None
    if any(dim in spec.shape[1:] for spec in inputs):
        return None
    return dim


def run_batch(inputs: Sequence[IoSpec], run: Run, requests: Sequence[Mapping[str, Any]]
              ) -> list[Outcome]:
    """Each request's outcome, in order. `run` is `Model.run` (or something counting its
    calls); `inputs` the model's `Model.inputs`."""
    results: list[Outcome | None] = [None] * len(requests)
    groups: dict[Any, list[int]] = {}
    batches = batch_dim(inputs) is not None
    names = {spec.name for spec in inputs}
    for i, feeds in enumerate(requests):
        key = _group_key(feeds, names) if batches else None
        groups.setdefault(("alone", i) if key is None else key, []).append(i)
    for members in groups.values():
        joined = _run_joined(run, [requests[i] for i in members]) if len(members) > 1 \
            else None
        for i, outcome in zip(members, joined or (_run_one(run, requests[i])
                                                  for i in members)):
            results[i] = outcome
    return results  # type: ignore[return-value]  # every slot is filled above


def _group_key(feeds: Mapping[str, Any], names: set[str]) -> tuple | None:
    """What requests must share to join: names, dtypes, shapes past axis 0 (None: a request
    that cannot join any: a missing input, a scalar, inputs of unequal rows)."""
    if set(feeds) != names:
        return None
    values = [feeds[name] for name in sorted(names)]
    if not all(isinstance(v, np.ndarray) and v.ndim for v in values) or \
            len({v.shape[0] for v in values}) != 1:
        return None
    return tuple((name, v.dtype.str, v.shape[1:]) for name, v in zip(sorted(names), values))


def _run_joined(run: Run, group: Sequence[Mapping[str, Any]]) -> list[Outcome] | None:
    """The group's outcomes from one call, or None when that call cannot stand for them
    (it failed, or an output's first dim is not the joined rows)."""
    rows = [len(next(iter(feeds.values()))) for feeds in group]
    joined = {name: np.concatenate([feeds[name] for feeds in group]) for name in group[0]}
    try:
        outputs = run(joined)
    except Exception:  # one request's bad feed, or an engine's own error: each runs alone
        return None
    total = sum(rows)
    if any(out.ndim == 0 or out.shape[0] != total for out in outputs):
        return None
    cuts = np.cumsum(rows)[:-1]
    parts = [np.split(out, cuts) for out in outputs]
    return [[part[i] for part in parts] for i in range(len(group))]


def _run_one(run: Run, feeds: Mapping[str, Any]) -> Outcome:
    try:
        return run(feeds)
    except Exception as err:  # this request's error, not the server's: it answers with it
        return err
