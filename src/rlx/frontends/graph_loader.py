"""`load_graph`: an rlx graph JSON file, or a bundle folder (graph + `weights.safetensors`).

The reference's `load.rs` (inventory section 2.8) for rlx's own JSON format: a folder is a
bundle holding `model.json` (or `graph.json`) and, optionally, `weights.safetensors`, whose
path becomes the default weights. ONNX files are not read here; `rlx.frontends`' ONNX
importer is. The weights themselves are left to `rlx.weights` (frontends may not import it):
this module only says where they are.

HIR input (the reference's high-level IR JSON, whose schema is not public) is recognised the
way the reference recognises it - a file named `model.hir.json` or `*.hir.json`, JSON text
with a `"fusion_policy"` key, a bundle folder holding `model.hir.json` - and refused with
one line saying what to give rlx instead.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rlx.errors import GraphError, ModelImportError
from rlx.ir.graph import Graph
from rlx.ir.serialize import graph_from_json
from rlx.ir.verification import verify

__all__ = ["LoadedGraph", "load_graph", "BUNDLE_GRAPH_FILES", "BUNDLE_WEIGHTS_FILE",
           "HirInputError", "is_hir"]

BUNDLE_GRAPH_FILES = ("model.json", "graph.json")  # looked for in this order
BUNDLE_WEIGHTS_FILE = "weights.safetensors"
HIR_BUNDLE_FILE = "model.hir.json"
_HIR_KEY = b'"fusion_policy"'


class HirInputError(ModelImportError):
    """The input is the reference's HIR JSON, which rlx does not read."""

    def __init__(self, path: Path):
        super().__init__(
            f"{path} is an HIR module (the Rust reference's high-level IR), which rlx does not "
            "read; export the model to ONNX and bake the .onnx file, or give rlx graph JSON "
            "(rlx.ir.serialize.graph_to_json)")


def is_hir(path: Path, text: bytes | None = None) -> bool:
    """The reference's test: the file name, or a `fusion_policy` key in the JSON object."""
    name = path.name.lower()
    if name == HIR_BUNDLE_FILE or name.endswith(".hir.json"):
        return True
    if text is None or _HIR_KEY not in text:
        return False
    try:
        body = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return True  # not JSON rlx could read either way: the key says what it was meant as
    return isinstance(body, dict) and "fusion_policy" in body


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
    if (folder / HIR_BUNDLE_FILE).is_file() and not any(
            (folder / n).is_file() for n in BUNDLE_GRAPH_FILES):
        raise HirInputError(folder / HIR_BUNDLE_FILE)
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
    if is_hir(path):
        raise HirInputError(path)
    try:
        raw = path.read_bytes()
        if is_hir(path, raw):
            raise HirInputError(path)
        graph = graph_from_json(raw)
        verify(graph)
    except OSError as err:
        raise ModelImportError(f"cannot read {path}: {err.strerror or err}") from err
    except GraphError as err:
        raise ModelImportError(f"{path}: {err}") from err
    return graph
