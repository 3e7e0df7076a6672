"""`load_graph`: an rlx graph JSON file, or a bundle folder (graph + `weights.safetensors`).

The reference's `load.rs` (inventory section 2.8) for rlx's own JSON format: a folder is a
bundle holding `model.json` (or `graph.json`) and, optionally, `weights.safetensors`, whose
path becomes the default weights. ONNX files are not read here; `rlx.frontends`' ONNX
importer is. The weights themselves are left to `rlx.weights` (frontends may not import it):
this module only says where they are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rlx.errors import GraphError, ModelImportError
from rlx.ir.graph import Graph
from rlx.ir.serialize import graph_from_json
from rlx.ir.verify import verify

__all__ = ["LoadedGraph", "load_graph", "BUNDLE_GRAPH_FILES", "BUNDLE_WEIGHTS_FILE"]

BUNDLE_GRAPH_FILES = ("model.json", "graph.json")  # looked for in this order
BUNDLE_WEIGHTS_FILE = "weights.safetensors"


@dataclass(frozen=True)
class LoadedGraph:
    """A graph, where its weights are by default (None: none known), and where it came from."""

    graph: Graph
    default_weights: Path | None
    source: str  # "json:<path>" or "bundle:<dir>"


def load_graph(path: str | os.PathLike[str]) -> LoadedGraph:
    """Read a graph JSON file or a bundle folder; any failure is a `ModelImportError`."""
    path = Path(path)
    if path.is_dir():
        return _load_bundle(path)
    if path.is_file():
        return LoadedGraph(_read_graph_json(path), None, f"json:{path}")
    raise ModelImportError(f"{path} is not a file or directory")


def _load_bundle(folder: Path) -> LoadedGraph:
    graph_file = next((folder / n for n in BUNDLE_GRAPH_FILES if (folder / n).is_file()), None)
    if graph_file is None:
        raise ModelImportError(f"bundle dir {folder} missing {BUNDLE_GRAPH_FILES[0]}")
    weights = folder / BUNDLE_WEIGHTS_FILE
    return LoadedGraph(_read_graph_json(graph_file), weights if weights.is_file() else None,
                       f"bundle:{folder}")


def _read_graph_json(path: Path) -> Graph:
    """Parse and verify, so a bad file fails here with its name rather than later."""
    if path.suffix.lower() == ".onnx":
        raise ModelImportError(f"{path} is an ONNX model, not graph JSON; import it with the "
                               f"ONNX importer")
    try:
        graph = graph_from_json(path.read_bytes())
        verify(graph)
    except OSError as err:
        raise ModelImportError(f"cannot read {path}: {err.strerror or err}") from err
    except GraphError as err:
        raise ModelImportError(f"{path}: {err}") from err
    return graph
