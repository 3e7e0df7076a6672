"""How `run` reads its arguments, for a `Model` and a stream alike.

Three spellings are accepted, so that onnxruntime users need not relearn the call:
rlx's `run(feeds, outputs=None)`, onnxruntime's `run(output_names, feeds)` (None for
every output) and, for a model with one input, a bare array in place of the feeds dict.
Anything else is a one-line `InputError` that shows the call that works.

`Model.run` recognises the everyday call, `run(dict)`, itself (one class check) and comes
here for the others, so their reading costs the common call nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np

from rlx.errors import InputError

__all__ = ["RunArgument", "RunArguments"]

RunArgument: TypeAlias = "Mapping[str, Any] | Sequence[str] | np.ndarray | None"
"""Either argument of `run`: feeds (a dict, or a bare array for one input), output names
(a list, one name, or None for all)."""

_SHOWN = 3  # inputs spelled out in an example call before "..."


class RunArguments:
    """Reads `run(first, second)` for a callee named `call` (e.g. "model.run") whose feeds
    are `inputs` and whose outputs are `outputs` (names, in graph order)."""

    def __init__(self, call: str, inputs: Sequence[str], outputs: Sequence[str]):
        self.call = call
        self.inputs = list(inputs)
        self.outputs = list(outputs)

    def read(self, first: RunArgument, second: RunArgument
             ) -> tuple[Mapping[str, Any], Sequence[str] | None]:
        """(feeds, wanted output names or None for all) from either argument order."""
        if isinstance(first, Mapping):
            return first, self._names(second)
        if first is None or _is_names(first):
            if second is None:
                raise InputError(f"no feeds given: {self.example()} "
                                 f"(or {self.call}(None, {{...}}) in onnxruntime's order)")
            return self._feeds(second), self._names(first)
        return self._feeds(first), self._names(second)

    def _feeds(self, value: Any) -> Mapping[str, Any]:
        if isinstance(value, Mapping):
            return value
        if not _is_array(value):
            raise InputError(f"feeds must be a dict of input name -> array, got "
                             f"{type(value).__name__}: {self.example()}")
        if len(self.inputs) != 1:
            raise InputError(f"a bare array feeds a single input, and there are "
                             f"{len(self.inputs)}: {self.example()}")
        return {self.inputs[0]: value}

    def _names(self, value: Any) -> Sequence[str] | None:
        if value is None or _is_names(value):
            return value
        shown = self.outputs[:1] or ["name"]
        raise InputError(f"outputs must be output names or None, got "
                         f"{type(value).__name__}: {self.call}({{...}}, {shown!r}); "
                         f"outputs are {self.outputs}")

    def example(self) -> str:
        """The call that works, spelled with this callee's input names."""
        items = [f"{name!r}: ..." for name in self.inputs[:_SHOWN]]
        if len(self.inputs) > _SHOWN:
            items.append(f"... {len(self.inputs) - _SHOWN} more")
        return f"{self.call}({{{', '.join(items)}}})"


def _is_names(value: Any) -> bool:
    """One output name, or a list or tuple of them."""
    return isinstance(value, str) or (
        isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))


def _is_array(value: Any) -> bool:
    """numpy arrays and what converts to one by protocol (torch, JAX); not lists."""
    return isinstance(value, np.ndarray) or hasattr(value, "__array__")
