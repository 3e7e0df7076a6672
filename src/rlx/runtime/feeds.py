"""Feeds as rlx takes them, the same for every engine: names, dtypes, ranks and sizes
checked against a graph's inputs, by onnxruntime's rules (`conform_feed`), and a
`FeedChecker` that repeats a passed verdict cheaply for the next run's like feeds.

Its own module so that engines other than numpy check feeds without importing the numpy
kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlx.errors import GraphError, InputError
from rlx.ir.dtype import DType
from rlx.ir.shape import Shape

if TYPE_CHECKING:
    from rlx.ir.graph import Node

__all__ = ["FeedChecker", "check_feeds", "conform_feed", "seeded_feeds", "SEEDED_DIM"]

SEEDED_DIM = 64
"""The size a seeded feed gives a symbolic dim past the first axis: 1 would be degenerate for
an image's width or height (a pooling window larger than the image); at 32 a classifier
downsampling 32-fold still met a 2-wide pool with a 1-wide map (OpenVINO refuses it). The
first axis, the batch, gets 1."""


def check_feeds(inputs: Sequence[Node], feeds: Mapping[str, Any]) -> dict[int, np.ndarray]:
    """rlx's feed checks, shared by every engine: each of the graph's `inputs` (Input nodes,
    or records with the same `id`, `source_name` and `tensor_shape`) fed once, no unknown
    names, dtypes, ranks and sizes as declared, each symbolic dim one size throughout.
    Returns the checked arrays by node id."""
    input_names = [n.source_name for n in inputs]
    names = set(input_names)
    unknown = sorted(set(feeds) - names)
    missing = [n for n in input_names if n not in feeds]
    if unknown or missing:
        parts = []
        if missing:
            parts.append(f"missing input(s) {', '.join(map(repr, missing))}")
        if unknown:
            parts.append(f"unknown input(s) {', '.join(map(repr, unknown))}")
        raise InputError(f"{'; '.join(parts)}; graph inputs are {sorted(names)}")
    bound: dict[str, int] = {}
    values: dict[int, np.ndarray] = {}
    for node in inputs:
        name = node.source_name
        values[node.id] = conform_feed(name, node.tensor_shape, feeds[name], bound)
    return values


class FeedChecker:
    """`check_feeds` for one graph's inputs, by name, for a run per call: a plain dict of
    exactly the declared names holding ndarrays of the declared dtypes and of the shapes
    accepted last (every fully fixed shape from the start) passes as it is, on one
    comparison per input (~0.3 us against ~3 us for a one-input model); any other feeds
    take the full check, its verdict and errors. What passes the full check depends on
    the dtypes and shapes alone, so a set that matches one that passed passes too."""

    def __init__(self, inputs: Sequence[Node]):
        self._inputs = list(inputs)
        self._names = tuple(n.source_name for n in self._inputs)
        self._dtypes = tuple(n.tensor_shape.dtype.numpy for n in self._inputs)
        # a tuple replaced whole, never mutated: runs on other threads read it as they go
        self._accepted: tuple[tuple[int, ...] | None, ...] = tuple(
            n.tensor_shape.static_dims if n.tensor_shape.is_static else None for n in self._inputs)

    def by_name(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The checked arrays by input name (`feeds` itself when it passes as it is)."""
        if type(feeds) is dict and len(feeds) == len(self._names):
            for name, dtype, shape in zip(self._names, self._dtypes, self._accepted):
                value = feeds.get(name)
                # `is`: numpy's built-in dtypes are single objects; any other goes the long way
                if value.__class__ is not np.ndarray or value.dtype is not dtype \
                        or value.shape != shape:
                    break
            else:
                return feeds
        checked = check_feeds(self._inputs, feeds)
        arrays = [checked[n.id] for n in self._inputs]
        if all(a is feeds[name] and a.__class__ is np.ndarray
               for a, name in zip(arrays, self._names)):
            self._accepted = tuple(a.shape for a in arrays)  # taken as given: next time fast
        return dict(zip(self._names, arrays))


def conform_feed(name: str, shape: Shape, value: Any,
                 bound: dict[str, int] | None = None) -> np.ndarray:
    """`value` as the graph input `name` of declared `shape` takes it, by onnxruntime's
    input rules, or an `InputError` saying what was expected.

    onnxruntime (1.32, measured) requires the exact dtype and, for a declared rank >= 1,
    the exact rank and every fixed dim; a declared scalar it takes at any shape. rlx takes
    a declared scalar as any one-element array (silero-vad's own feeds pass `sr` as
    int64 [1]), reshaped to rank 0 without a copy; more elements cannot fit the scalar the
    graph was built around, so they stay an error. A symbolic dim must have one size over
    all inputs (`bound` collects them; onnxruntime does not check, but rlx's graph relies
    on it). Python scalars and lists take the declared dtype.
    """
    want = shape.dtype.numpy
    if not isinstance(value, np.ndarray):
        value = np.asarray(value, dtype=want)

    def wrong(why: str) -> InputError:  # built only on failure: feeds are checked per call
        try:
            dtype: object = DType.from_numpy(value.dtype)
        except GraphError:
            dtype = value.dtype
        return InputError(f"input {name!r}: expected {shape}, got "
                          f"{dtype}[{', '.join(map(str, value.shape))}]{why}")

    if value.dtype != want:
        raise wrong(" (the dtype must match)")
    if shape.rank == 0 and value.ndim:
        if value.size != 1:
            raise wrong(" (a scalar takes one element)")
        return value.reshape(())  # a view: one element is contiguous in any layout
    if value.ndim != shape.rank:
        raise wrong(f" (expected rank {shape.rank}, got rank {value.ndim})")
    for axis, (dim, size) in enumerate(zip(shape.dims, value.shape)):
        if isinstance(dim, int):
            if dim != size:
                raise wrong(f" (axis {axis}: expected {dim}, got {size})")
        elif dim != "?":
            if bound is None:
                bound = {}
            if bound.setdefault(dim, size) != size:
                raise wrong(f": dim {dim!r} is {bound[dim]} elsewhere")
    return value



def seeded_feeds(inputs: Sequence[Node], rng: np.random.Generator | None = None
                 ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """One feed of each input's declared shape and dtype, by source name, and the size each
    symbolic dim was given (the first axis 1, the others `SEEDED_DIM`). Floats are standard
    normal from `rng` (zeros without one); integers and booleans are zeros, which index,
    count and select safely whatever the model does with them."""
    sized: dict[str, int] = {}
    feeds: dict[str, np.ndarray] = {}
    for node in inputs:
        shape = node.tensor_shape
        dims = []
        for axis, d in enumerate(shape.dims):
            if not isinstance(d, int):
                d = sized.setdefault(str(d), 1 if axis == 0 else SEEDED_DIM)
            dims.append(d)
        dtype = shape.dtype.numpy
        feeds[node.source_name] = rng.standard_normal(dims).astype(dtype) \
            if rng is not None and shape.dtype.is_float else np.zeros(dims, dtype)
    return feeds, sized
