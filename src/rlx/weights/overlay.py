"""`overlay_weights`: a weights file laid over the weights a model came with (its ONNX
initializers), the file winning on a name; a file that matches none of the graph's params
is refused, since baking it would silently keep the model's own weights."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from rlx.errors import WeightError
from rlx.weights.bundle import WeightBundle
from rlx.weights.matching import likely_params

__all__ = ["overlay_weights"]


def overlay_weights(own: Mapping[str, Any], loaded: WeightBundle, params: Collection[str],
                    source: str | None = None) -> WeightBundle:
    """`own` (the model's bindings) overlaid with `loaded` (from `load_weights`), for a graph
    whose params are named `params` (a mapping to their shapes: the error then says which
    param a tensor likely is); `WeightError` when `loaded` names none of them.
    `source`: the weights path to name (default `loaded.source`)."""
    source = loaded.source if source is None else source
    names = set(loaded.tensors) | {w.name for w in loaded.packed}
    if not names & set(params):
        likely = likely_params(names, {**own, **loaded.tensors}, params) \
            if isinstance(params, Mapping) else {}
        hints = "".join(f"; {name} is likely {hint}" for name, hint in sorted(likely.items()))
        raise WeightError(f"weights file {source} matches none of the graph's params "
                          f"(weights: {some_names(names)}; params: {some_names(set(params))}"
                          f"{hints})")
    packed = {w.name for w in loaded.packed}
    tensors = {k: v for k, v in {**own, **loaded.tensors}.items() if k not in packed}
    return WeightBundle(tensors, list(loaded.packed), source, bt=loaded.bt)


def some_names(names: Collection[str], limit: int = 6) -> str:
    """Up to `limit` names, sorted, and how many there are in all (for one-line errors)."""
    shown = sorted(names)[:limit]
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return (", ".join(shown) + more) if names else "none"
