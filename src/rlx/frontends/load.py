"""`load_model`: any model input rlx reads (an ONNX file, graph JSON, a bundle folder) as
a graph plus the weights that came with it, the one place that decides the input's kind.

The kind comes from the file's first bytes, else its name, so an `.rlx` artifact or a
weights file given where a model belongs is refused with what to do instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlx.artifact.sniff import ARTIFACT, ENCRYPTED_ARTIFACT, ONNX_MODEL, file_format
from rlx.errors import ModelImportError
from rlx.ir.graph import Graph

__all__ = ["LoadedModel", "load_model"]


@dataclass(frozen=True)
class LoadedModel:
    """A model read from a file; unpacks as `(graph, bindings)`, like `import_onnx`.

    `bindings`: weights that came with the model (ONNX initializers); `default_weights`:
    the weights file a bundle folder names (None: none); `source`: "onnx:<path>",
    "json:<path>" or "bundle:<dir>"; `onnx_op_types`: the ONNX file's nodes by op type."""

    graph: Graph
    bindings: dict[str, Any]
    default_weights: Path | None
    source: str
    onnx_op_types: dict[str, int] | None = None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.graph, self.bindings))


def load_model(path: str | os.PathLike[str], *,
               input_shapes: Mapping[str, Sequence[int | str]] | None = None,
               dims: Mapping[str, int] | None = None) -> LoadedModel:
    """Read the model at `path`. `input_shapes` and `dims` fix an ONNX model's input dims
    (see `import_onnx`); a graph JSON file declares its own, so they are refused there."""
    path = Path(path)
    kind = file_format(str(path)) if path.is_file() else None
    if kind in (ARTIFACT, ENCRYPTED_ARTIFACT):
        raise ModelImportError(f"{path} is {kind} already: inspect, run or verify it "
                               "(relayout changes its memory mode); bake reads a model")
    if kind is not None and kind != ONNX_MODEL and path.suffix.lower() != ".json":
        raise ModelImportError(f"{path} is {kind}, not a model: bake a model (an .onnx file, "
                               f"a graph JSON file or a bundle folder) with --weights {path}")
    if kind == ONNX_MODEL or path.suffix.lower() == ".onnx":  # the bytes say, or the name
        # imported here: onnx takes a good part of a second, which JSON input never needs
        from rlx.onnx import import_onnx, onnx_op_types, read_model

        proto = read_model(path)
        graph, bindings = import_onnx(proto, base_dir=path.resolve().parent,
                                      input_shapes=input_shapes or None, dims=dims or None)
        return LoadedModel(graph, dict(bindings), None, f"onnx:{path}", onnx_op_types(proto))
    if input_shapes or dims:
        raise ModelImportError(f"{path}: --input-shapes and --dim apply to ONNX models; a "
                               "graph JSON file declares its own input shapes")
    from rlx.frontends.graph_loader import load_graph

    loaded = load_graph(path)
    return LoadedModel(loaded.graph, {}, loaded.default_weights, loaded.source)
