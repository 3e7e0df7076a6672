"""`likely_params`: which param a weights file's tensor that matches no param's name most
likely stands for.

`rlx-bake tensors` writes a baked file's weights under the baked graph's names. A weight
the bake made from a param (a Gemm's `B` folded with its transpose, say) has no param name
left and comes out as `w182`; baked again with that file, it matches nothing and the model's
own weight stays. The warning then says which param it is a form of: a param of the same
elements, as they are or transposed, whose own values (when the model has them) agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from rlx.deferred import Payload, defer, materialize, read_rows

__all__ = ["likely_params"]

# a baked weight is its param's values exactly, or rounded by a lossy encoding (Q8_0, f16)
_AGREE = 0.05  # ||baked - own|| / ||own||


def likely_params(unused: Iterable[str], tensors: Mapping[str, Payload],
                  param_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, str]:
    """For each of the `unused` tensors (in `tensors`), `param 'name'` or `param 'name'
    transposed` when exactly one param of `param_shapes` fits it; the params' own values,
    when `tensors` holds them, must agree with it."""
    hints = {}
    for name in unused:
        value = tensors.get(name)
        if value is None:
            continue
        found = [hint for param, shape in param_shapes.items()
                 if (hint := _fits(value, param, shape, tensors.get(param))) is not None]
        if len(found) == 1:
            hints[name] = found[0]
    return hints


def _fits(value: Payload, param: str, shape: tuple[int, ...], own: Payload | None
          ) -> str | None:
    dims = tuple(value.shape)
    for transposed in (False, True) if len(dims) > 1 else (False,):
        if (dims[::-1] if transposed else dims) != shape:
            continue
        if own is None or _agree(value, own, transposed):
            return f"param {param!r}" + (" transposed" if transposed else "")
    return None


def _agree(baked: Payload, own: Payload, transposed: bool) -> bool:
    """Whether `baked` (or its transpose) is `own` within `_AGREE`; a large matrix is
    compared on a grid of `_SAMPLE` rows by `_SAMPLE` columns, read a row at a time: a hint
    is no reason to hold a weight a streaming bake never holds whole."""
    expected = tuple(baked.shape[::-1] if transposed else baked.shape)
    if tuple(own.shape) != expected or baked.dtype.kind != "f" or own.dtype.kind != "f":
        return False
    if baked.ndim == 2 and baked.nbytes > _WHOLE_BYTES:
        rows, cols = (_spread(n) for n in baked.shape)
        theirs = _grid(own, cols, rows).T if transposed else _grid(own, rows, cols)
        return _close(_grid(baked, rows, cols), theirs)
    if baked.nbytes > _WHOLE_BYTES:  # rank 3 or more and large: no hint rather than a read
        return False
    array = materialize(baked)
    return _close(array.T if transposed else array, materialize(own))


_WHOLE_BYTES = 16 << 20  # compared whole up to this size
_SAMPLE = 64


def _spread(n: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, _SAMPLE)).astype(np.int64))


def _grid(value: Payload, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The grid, each row read from the file when `value` views a weights file's map
    (`defer`): touched through the map, each row faulted in far more than itself."""
    value = defer(value)
    return np.stack([read_rows(value, int(r), int(r) + 1)[0, cols] for r in rows])


def _close(baked: np.ndarray, own: np.ndarray) -> bool:
    own64 = own.astype(np.float64)
    norm = float(np.linalg.norm(own64))
    error = float(np.linalg.norm(baked.astype(np.float64) - own64))
    return error <= _AGREE * norm if norm else error == 0
