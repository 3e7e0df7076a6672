"""`bake_file`: a model file in, an artifact file out, in one call; what `rlx-bake bake`
does, for Python users and the benchmarks alike.

The model is read by `rlx.frontends.load_model`, a weights file (or a bundle's own) is laid
over its weights by `rlx.weights.overlay_weights`, the graph is baked by `bake_bundle` and
the artifact written by `rlx.artifact.write_artifact`, whose format checks run first, so a
bad output fails before the long work.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlx.artifact.model import RlxFile
from rlx.artifact.output import (
    WrittenArtifact,
    artifact_format,
    check_artifact_output,
    write_artifact,
)
from rlx.baking.options import BakeOptions, BakeProfile
from rlx.baking.pipeline import BakeReport, bake_bundle
from rlx.errors import BakeError
from rlx.frontends import LoadedModel, load_model
from rlx.ir import Constant, Graph
from rlx.weights import WeightBundle, WeightLoadPolicy, load_weights, overlay_weights

if TYPE_CHECKING:
    from rlx.artifact.crypto import KdfParams

__all__ = ["BakedFile", "WeightsUsed", "bake_file", "constant_bytes"]


@dataclass(frozen=True)
class WeightsUsed:
    """The weights file laid over the model's own: its path, how many dense and packed
    tensors it gave, and the f32-first verdict on its packed ones (None: no packs)."""

    path: str
    dense: int
    packed: int
    verdict: str | None


@dataclass(frozen=True)
class BakedFile:
    """What `bake_file` did: the artifact and the bake's report, the model it read, the
    weights file it used (None: the model's own weights), the weight bytes that went in
    (params' bindings plus the graph's constants) and what was written."""

    file: RlxFile
    report: BakeReport
    model: LoadedModel
    weights: WeightsUsed | None
    weights_in_bytes: int
    written: WrittenArtifact


def bake_file(src: str | os.PathLike, dst: str | os.PathLike, *,
              profile: BakeProfile | str | None = None, options: BakeOptions | None = None,
              weights: str | os.PathLike | None = None,
              weights_policy: WeightLoadPolicy | str = WeightLoadPolicy.F32_FIRST,
              input_shapes: Mapping[str, Sequence[int | str]] | None = None,
              dims: Mapping[str, int] | None = None, format: str | None = None,
              container: str | None = None, password: str | bytes | None = None,
              kdf: KdfParams | None = None, tier: str | None = None,
              tiers: Mapping[str, str] | None = None,
              progress: Callable[[str], None] = lambda _: None, **package: Any) -> BakedFile:
    """Bake the model at `src` (ONNX, graph JSON or a bundle folder) into `dst`.

    `profile` (default exact) or full `options`; `weights`: a weights file or folder laid
    over the model's own (default: a bundle's weights file); `input_shapes` / `dims`: see
    `load_model`; `format`, `container`, `password`, `kdf`, `tier`, `tiers` and `package`:
    see `write_artifact`. `progress` hears what is being done (for a spinner)."""
    if options is not None and profile is not None:
        raise BakeError("give bake_file a profile or options, not both")
    opts = options or BakeOptions.from_profile(profile or BakeProfile.EXACT)
    fmt = artifact_format(dst, format, container=container, packaged=bool(tier or tiers),
                          encrypted=password is not None)
    check_artifact_output(dst, fmt, container)
    model = load_model(src, input_shapes=input_shapes, dims=dims)
    progress("loading weights")
    bundle, used = _weights(model, weights, weights_policy, opts)
    params = {n.source_name for n in model.graph.params()}
    # weights come as bindings of params, or inside the graph as constants (exporters that
    # write weights as Constant nodes, subgraph initializers)
    weights_in = sum(v.nbytes for k, v in bundle.tensors.items() if k in params) \
        + sum(w.data.nbytes for w in bundle.packed if w.name in params) \
        + constant_bytes(model.graph)
    progress("baking")
    file, report = bake_bundle(model.graph, bundle, opts)
    progress("encrypting and writing" if password is not None else "writing")
    written = write_artifact(dst, file, fmt, container=container, password=password, kdf=kdf,
                             tier=tier, tiers=tiers, **package)
    return BakedFile(file, report, model, used, weights_in, written)


def _weights(model: LoadedModel, path: str | os.PathLike | None,
             policy: WeightLoadPolicy | str, opts: BakeOptions
             ) -> tuple[WeightBundle, WeightsUsed | None]:
    """The model's own weights overlaid with the weights file (which wins on a name)."""
    chosen = Path(path) if path else model.default_weights
    if chosen is None:
        return WeightBundle(dict(model.bindings), source=model.source), None
    loaded = load_weights(chosen, policy, opts)
    params = {n.source_name: tuple(int(d) for d in n.tensor_shape.dims)
              for n in model.graph.params()}
    bundle = overlay_weights(model.bindings, loaded, params, source=str(chosen))
    used = WeightsUsed(str(chosen), len(loaded.tensors), len(loaded.packed),
                       str(loaded.verdict) if loaded.verdict else None)
    return bundle, used


def constant_bytes(graph: Graph, skip: frozenset[int] = frozenset()) -> int:
    """Payload bytes of the graph's Constants, subgraphs included, but for the top-level
    nodes in `skip` (those a weight-table row already counts)."""
    own = sum(n.op.nbytes for n in graph.nodes()
              if isinstance(n.op, Constant) and n.id not in skip)
    return own + sum(constant_bytes(sub) for n in graph.nodes() for sub in n.op.subgraphs())
