"""`write_rlxp`: an `RlxFile` as an `.rlxp` package (flat, zip or dir), atomic and deterministic.

Every byte a package holds is stored once: each weight row's bytes (or, for a runtime-mode
file, its graph Constant's) and every other Constant become one TOC tensor; the graph is
written with its Constants emptied (`strip_graph_weights`), each naming the tensor that
refills it on load, and the weight table names the same tensors, so the reader rebuilds the
file's memory mode exactly (duplex: both views of one buffer). Tensors are 64-byte aligned.
The same file and options always give the same bytes: fixed key order, a creation time that
is fixed unless the caller passes one, zero padding. A package is built in memory: deferred
weights (`rlx.deferred`) are read into it, unlike `write_rlx`, which streams them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlx.artifact.atomic import atomic_write
from rlx.artifact.layout import checksum, header_digest
from rlx.artifact.model import RlxFile
from rlx.artifact.rlxp import layout as L
from rlx.artifact.rlxp.zblk import DEFAULT_BLOCK, TIERS, encode_tier
from rlx.deferred import Payload, byte_view, materialize
from rlx.errors import ArtifactError
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.sources import Constant, Input
from rlx.ir.serialize import graph_to_dict
from rlx.ir.shape import Shape
from rlx.stored_zip import write_stored_zip
from rlx.version import __version__

log = logging.getLogger(__name__)

__all__ = ["RlxpOptions", "write_rlxp", "encode_rlxp"]

ALIGN = 64


@dataclass(frozen=True)
class RlxpOptions:
    """How to write a package.

    `tier` is the default storage tier of tensors (hot: raw and mapped zero-copy, the right
    default for runtime weights; warm: zstd blocks; cold: one zstd frame); `tiers` overrides
    it per tensor name. Sidecars default to cold in a flat package and hot (plain JSON
    files, readable with unzip) in zip and dir. `created` is the manifest's creation time
    (fixed by default so writes are deterministic)."""

    container: str | None = None
    tier: str = "hot"
    tiers: Mapping[str, str] = field(default_factory=dict)
    sidecar_tier: str | None = None
    block_size: int = DEFAULT_BLOCK
    created: str = L.FIXED_CREATED
    producer: str = f"rlx {__version__}"
    features: tuple[str, ...] = ()
    include_graph: bool = True
    sidecars: Mapping[str, Any] = field(default_factory=dict)  # extra JSON sidecars by id
    placement: Mapping[str, Any] | None = None

    def check(self) -> None:
        for name, tier in (("tier", self.tier), *self.tiers.items(),
                           ("sidecar_tier", self.sidecar_tier or "hot")):
            if tier not in TIERS:
                raise ArtifactError(f"unknown storage tier {tier!r} for {name}; expected "
                                    "hot, warm or cold")
        if self.container is not None and self.container not in L.CONTAINERS:
            raise ArtifactError(f"unknown container {self.container!r}; expected flat, zip "
                                "or dir")
        bad = [s for s in self.sidecars if s == "io" or not s.replace("_", "").isalnum()]
        if bad:
            raise ArtifactError(f"sidecar id {bad[0]!r} is reserved or not alphanumeric")


@dataclass
class _Tensor:
    row: dict[str, Any]  # the TOC row without its placement fields
    stored: Any  # bytes or a view
    raw_len: int


@dataclass
class Encoded:
    """A package before it is laid out in a container."""

    toc: dict[str, Any]  # manifest, rlx section; graph/tensors/sidecars filled by containers
    graph: bytes | None
    tensors: list[_Tensor]
    sidecars: list[tuple[str, dict[str, Any], Any]]  # (id, row, stored bytes)
    placement: bytes | None


def write_rlxp(path: str | os.PathLike, file: RlxFile, container: str | None = None, *,
               options: RlxpOptions | None = None, **changes) -> str:
    """Write `file` as a package; the container comes from `container`, the options or the
    path (`container_for`). Returns the container written."""
    opts = options or RlxpOptions()
    if changes:
        opts = RlxpOptions(**{**asdict(opts), **changes})
    opts.check()
    kind = L.container_for(os.fspath(path), container or opts.container)
    if kind not in L.CONTAINERS:
        raise ArtifactError(f"unknown container {kind!r}; expected flat, zip or dir")
    sidecar_tier = opts.sidecar_tier or ("cold" if kind == "flat" else "hot")
    if file.self_test is not None:  # sidecars are read at every open: it would not be lazy
        log.warning("%s: the bundled self-test is not kept (packages have no self-test "
                    "section; write an .rlx to keep it)", os.fspath(path))
    encoded = encode_rlxp(file, opts, sidecar_tier)
    if kind == "dir":
        _write_dir(Path(path), encoded)
    else:
        with atomic_write(path) as out:
            (_write_flat if kind == "flat" else _write_zip)(out, encoded)
    return kind


# -- encoding ------------------------------------------------------------------------------
def encode_rlxp(file: RlxFile, opts: RlxpOptions, sidecar_tier: str) -> Encoded:
    file.check_integrity()  # a file read lazily: its bytes get new checksums here
    tensors: list[_Tensor] = []
    names: set[str] = set()
    graph = file.graph

    def add(name: str, shape, scheme: str, layout: str, payload: Payload) -> int:
        tier = opts.tiers.get(name, opts.tier)
        data = byte_view(materialize(payload))  # a package is built in memory
        stored = encode_tier(tier, data, opts.block_size)
        tensors.append(_Tensor({
            "name": name, "shape": [int(d) for d in shape], "scheme": scheme,
            "layout": layout, "tier": tier, "codec": TIERS[tier],
        }, stored, int(data.nbytes)))
        names.add(name)
        return len(tensors) - 1

    node_tensor: dict[int, int] = {}
    rows = []
    for row in file.weights:
        node = _linked(graph, row.node_id) if opts.include_graph else None
        held = None
        if node is not None and _constant(node)[0].nbytes:
            held = _constant(node)[0].data
        data = row.data if row.nbytes else held
        index = None
        if data is not None:
            index = add(row.name, row.shape, row.encoding, row.layout, data)
            if held is not None and node is not None and node.id not in node_tensor:
                if held is data or _same_bytes(held, data):
                    node_tensor[node.id] = index
                else:  # different bytes in graph and table: both kept, each once
                    shape = _constant(node)[1]
                    node_tensor[node.id] = add(_fresh(f"{row.name}#graph", names),
                                               shape.dims, shape.dtype.value, "row_major", held)
        rows.append({
            "name": row.name, "shape": list(row.shape), "dtype": row.dtype,
            "encoding": row.encoding, "layout": row.layout, "row_aligned": row.row_aligned,
            "node_id": row.node_id if opts.include_graph else None, "note": row.note,
            "tensor": index if row.nbytes else None,
        })

    def encode_constant(node: Node) -> dict:
        top = node.id < len(graph) and graph.node(node.id) is node  # not a subgraph's
        if top and node.id in node_tensor:
            return {"tensor": node_tensor[node.id]}
        op, shape = _constant(node)
        if not op.nbytes:
            return {"tensor": None}
        name = _fresh(node.name or f"constant:{node.id}", names)
        return {"tensor": add(name, shape.dims, shape.dtype.value, "row_major", op.data)}

    graph_bytes = None
    if opts.include_graph:
        graph_bytes = _json(graph_to_dict(graph, encode_constant))
    sidecars = _sidecars(file, opts, sidecar_tier)
    placement = _json(opts.placement) if opts.placement is not None else None
    toc = {"manifest": _manifest(file, opts, tensors, sidecar_tier, placement is not None),
           "rlx": {"meta": file.meta.to_json(), "weights": rows}}
    return Encoded(toc, graph_bytes, tensors, sidecars, placement)


def _sidecars(file: RlxFile, opts: RlxpOptions, tier: str) -> list[tuple[str, dict, Any]]:
    """(id, index entry, stored bytes) of the I/O sidecar and the caller's, in `tier`."""
    sidecars = []
    for sidecar_id, body in (("io", _io_sidecar(file)), *sorted(opts.sidecars.items())):
        raw = _json(body)
        entry: dict[str, Any] = {"id": sidecar_id, "media": "application/json",
                                 "tier": tier, "codec": TIERS[tier], "raw_len": len(raw)}
        sidecars.append((sidecar_id, entry, raw if tier == "hot" else encode_tier(tier, raw)))
    return sidecars


def _constant(node: Node) -> tuple[Constant, Shape]:
    """A Constant node's op and (single) shape, typed."""
    assert isinstance(node.op, Constant) and isinstance(node.shape, Shape)
    return node.op, node.shape


def _linked(graph: Graph, node_id: int | None) -> Node | None:
    if node_id is None or not 0 <= node_id < len(graph):
        return None
    node = graph.node(node_id)
    return node if isinstance(node.op, Constant) else None


def _same_bytes(a: Payload, b: Payload) -> bool:
    return a.nbytes == b.nbytes and bool(np.array_equal(byte_view(materialize(a)),
                                                        byte_view(materialize(b))))


def _fresh(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        candidate, n = f"{name}#{n}", n + 1
    return candidate


def _json(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _io_sidecar(file: RlxFile) -> dict[str, Any]:
    """The graph's input and output names, dtypes and shapes (symbolic dims by name)."""
    graph = file.graph
    if not len(graph):
        return {"inputs": [], "outputs": []}
    inputs = [{"name": n.op.name, "dtype": s.dtype.value, "shape": list(s.dims)}
              for n in graph.nodes() if isinstance(n.op, Input)
              for s in [n.shape] if isinstance(s, Shape)]
    outputs = [{"name": io.name, "dtype": io.dtype, "shape": list(io.shape)}
               for io in file.meta.outputs]
    return {"inputs": inputs, "outputs": outputs}


def _manifest(file: RlxFile, opts: RlxpOptions, tensors: list[_Tensor], sidecar_tier: str,
              placement: bool) -> dict[str, Any]:
    tiers = {t.row["tier"] for t in tensors}
    schemes = {t.row["scheme"] for t in tensors}
    features = set(opts.features) | {"strip_graph_weights", "sidecar_io"}
    features |= {f"sidecar_{s}" for s in opts.sidecars}
    if opts.include_graph:
        features.add("executable_graph")
    else:
        features.add("weight_only")
    if len(tiers | ({sidecar_tier} if sidecar_tier != "hot" else set())) > 1:
        features.add("hybrid_storage")
    if "warm" in tiers:
        features.add("zstd_blocks_warm")
    if "cold" in tiers or sidecar_tier == "cold":
        features.add("zstd_cold")
    if any(s.startswith(("gguf_", "mlx_")) for s in schemes):
        features.add("dequant_matmul")
    if any(s.startswith("mlx_") for s in schemes):
        features.add("mlx_packed")
    if placement:
        features.add("dist_placement")
    return {
        "format": L.FORMAT, "format_version": L.FORMAT_VERSION,
        "compat_version": L.COMPAT_VERSION, "name": file.meta.name,
        "producer": opts.producer, "created": opts.created, "features": sorted(features),
        "graph_encoding": L.GRAPH_ENCODING if opts.include_graph else L.NO_GRAPH,
    }


# -- containers ----------------------------------------------------------------------------
def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _region(stored, offset: int) -> dict[str, Any]:
    return {"offset": offset, "length": len(memoryview(stored).cast("B")),
            "xxh3": checksum(stored)}


def _tensor_rows(tensors: list[_Tensor], start: int) -> tuple[list[dict], int]:
    """TOC rows with offsets from `start` (each aligned), and the end of the last one."""
    rows, cursor = [], start
    for t in tensors:
        cursor = _align(cursor)
        region = _region(t.stored, cursor)
        rows.append({**t.row, "offset": cursor, "stored_len": region["length"],
                     "raw_len": t.raw_len, "xxh3": region["xxh3"]})
        cursor += region["length"]
    return rows, cursor


def _write_flat(out, enc: Encoded) -> None:
    """Header, TOC, its digest, padding, then graph, tensors, sidecars, placement."""
    cursor = 0
    pieces: list[tuple[int, Any]] = []
    toc = dict(enc.toc)
    if enc.graph is not None:
        toc["graph"] = _region(enc.graph, 0)
        pieces.append((0, enc.graph))
        cursor = len(enc.graph)
    else:
        toc["graph"] = None
    toc["tensors"], cursor = _tensor_rows(enc.tensors, cursor)
    pieces += [(row["offset"], t.stored) for row, t in zip(toc["tensors"], enc.tensors)]
    sidecars = []
    for _, row, stored in enc.sidecars:
        cursor = _align(cursor)
        sidecars.append({**row, **_region(stored, cursor)})
        pieces.append((cursor, stored))
        cursor += sidecars[-1]["length"]
    toc["sidecars"] = sidecars
    toc["placement"] = None
    if enc.placement is not None:
        cursor = _align(cursor)
        toc["placement"] = _region(enc.placement, cursor)
        pieces.append((cursor, enc.placement))
    text = _json(toc)
    out.write(L.FLAT_HEADER.pack(L.FLAT_MAGIC, L.CONTAINER_VERSION, L.WRITTEN_FLAGS, len(text)))
    out.write(text)
    out.write(header_digest(text))
    head = L.FLAT_HEADER.size + len(text) + 16
    out.write(bytes(_align(head) - head))
    _write_pieces(out, pieces)


def _write_pieces(out, pieces: Iterable[tuple[int, Any]]) -> None:
    written = 0
    for offset, stored in pieces:
        out.write(bytes(offset - written))
        view = memoryview(stored).cast("B")
        out.write(view)
        written = offset + len(view)


def _members(enc: Encoded, addressed: bool = False) -> list[tuple[str, list]]:
    """The zip/dir members, in order: rlx.json first, then graph, io, index, shard, ...
    `addressed` (dir packages) names each member but rlx.json by its content's digest."""
    def named(member: str, digest: str) -> str:
        return L.addressed_member(member, digest) if addressed else member

    toc = dict(enc.toc)
    members: list[tuple[str, list]] = []
    if enc.graph is not None:
        region = _region(enc.graph, 0)
        toc["graph"] = {"member": named(L.MEMBERS["graph"], region["xxh3"]), **region}
        members.append((toc["graph"]["member"], [enc.graph]))
    else:
        toc["graph"] = None
    rows, _ = _tensor_rows(enc.tensors, 0)
    pieces: list[tuple[int, Any]] = [(r["offset"], t.stored) for r, t in zip(rows, enc.tensors)]
    sidecars = []
    for sidecar_id, row, stored in enc.sidecars:
        region = _region(stored, 0)
        member = named(L.sidecar_member(sidecar_id, row["tier"] != "hot"), region["xxh3"])
        sidecars.append({**row, "member": member, **region})
        members.append((member, [stored]))
    toc["sidecars"] = sidecars
    shard = named(L.MEMBERS["shard"], checksum(_json(rows)))  # the rows fix its bytes
    index_bytes = _json({"shard": shard, "tensors": rows})
    toc["index"] = {"member": named(L.MEMBERS["index"], checksum(index_bytes)),
                    **_region(index_bytes, 0)}
    toc["placement"] = None
    if enc.placement is not None:
        region = _region(enc.placement, 0)
        toc["placement"] = {"member": named(L.MEMBERS["placement"], region["xxh3"]), **region}
    members.append((toc["index"]["member"], [index_bytes]))
    members.append((shard, list(_padded(pieces))))
    if toc["placement"] is not None:
        members.append((toc["placement"]["member"], [enc.placement]))
    return [(L.MEMBERS["toc"], [_json(toc)]), *members]


def _padded(pieces: list[tuple[int, Any]]) -> Iterable[Any]:
    written = 0
    for offset, stored in pieces:
        yield bytes(offset - written)
        view = memoryview(stored).cast("B")
        yield view
        written = offset + len(view)


def _write_zip(out, enc: Encoded) -> None:
    write_stored_zip(out, _members(enc))


def _write_dir(path: Path, enc: Encoded) -> None:
    """Each member as a file under `path` (created if missing), named by its content and
    written atomically, then rlx.json replaced by rename, then the members no longer named
    removed: at every moment a reader finds the previous package or the new one whole."""
    if path.exists() and not path.is_dir():
        raise ArtifactError(f"{path} exists and is not a folder; a dir package needs one")
    members = _members(enc, addressed=True)
    for name, pieces in [*members[1:], members[0]]:
        dest = path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(dest) as out:
            for piece in pieces:
                out.write(memoryview(piece).cast("B") if not isinstance(piece, bytes) else piece)
    _remove_unnamed(path, {name for name, _ in members})


def _remove_unnamed(path: Path, named: set[str]) -> None:
    """Delete the package members under `path` that rlx.json no longer names (an earlier
    package's); files with other names are not the writer's to touch."""
    for folder, _, files in os.walk(path):
        for file in files:
            name = (Path(folder) / file).relative_to(path).as_posix()
            if name not in named and L.is_member_name(name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path / name)
