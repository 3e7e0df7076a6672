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

from rlx.deferred import Payload, materialize

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
        array = materialize(value)
        if own is None or _agree(array.T if transposed else array, materialize(own)):
            return f"param {param!r}" + (" transposed" if transposed else "")
    return None


def _agree(baked: np.ndarray, own: np.ndarray) -> bool:
    if baked.shape != own.shape or baked.dtype.kind != "f" or own.dtype.kind != "f":
        return False
    own64 = own.astype(np.float64)
    norm = float(np.linalg.norm(own64))
    error = float(np.linalg.norm(baked.astype(np.float64) - own64))
    return error <= _AGREE * norm if norm else error == 0
