"""Constants of the `.rlxp` package layout shared by its writer and reader (docs/format.md)."""

from __future__ import annotations

import re
import struct

__all__ = [
    "FLAT_MAGIC", "FLAT_HEADER", "CONTAINER_VERSION", "FLAG_HYBRID", "FLAG_BINCODE_TOC",
    "FLAG_TOC_DIGEST", "KNOWN_FLAGS", "WRITTEN_FLAGS", "FORMAT", "FORMAT_VERSION", "COMPAT_VERSION",
    "GRAPH_ENCODING", "NO_GRAPH", "FIXED_CREATED", "CONTAINERS", "MEMBERS",
    "MAX_TOC_BYTES", "addressed_member", "is_member_name", "is_shard_name",
    "sidecar_member", "container_for",
]

FLAT_MAGIC = b"RLXPFLAT"
FLAT_HEADER = struct.Struct("<8sIIQ")  # magic, container version, flags, TOC length: 24 bytes
CONTAINER_VERSION = 2  # "hybrid": the reference reads 1 too; rlx writes and reads 2
FLAG_HYBRID = 1  # tensors may sit in different storage tiers
FLAG_BINCODE_TOC = 2  # the reference's bincode TOC envelope: not read by rlx
FLAG_TOC_DIGEST = 4  # rlx: 16 bytes of XXH3-128 of the TOC follow it
KNOWN_FLAGS = FLAG_HYBRID | FLAG_BINCODE_TOC | FLAG_TOC_DIGEST
WRITTEN_FLAGS = FLAG_HYBRID | FLAG_TOC_DIGEST  # what rlx writes, and the only value it reads
FORMAT = "rlxp"
FORMAT_VERSION = 2
COMPAT_VERSION = 2  # the oldest reader version that can read what this writer writes
GRAPH_ENCODING = "rlx-graph-json"  # rlx's JSON graph (not the reference's bincode_graph_v1)
NO_GRAPH = "none"
FIXED_CREATED = "1970-01-01T00:00:00Z"  # default creation time: writes are deterministic
CONTAINERS = ("flat", "zip", "dir")
MAX_TOC_BYTES = 256 << 20

# members of the zip and dir containers (inventory 4.5); `graph/mir.bin` holds the graph in
# the encoding the manifest names
MEMBERS = {
    "toc": "rlx.json", "graph": "graph/mir.bin", "io": "graph/io.json",
    "index": "weights/index.json", "shard": "weights/shards/000.pack.bin",
    "placement": "dist/placement.json",
}


def sidecar_member(sidecar_id: str, compressed: bool) -> str:
    """The zip/dir member of a sidecar (`io` is `graph/io.json`, as in the reference)."""
    base = MEMBERS["io"] if sidecar_id == "io" else f"sidecars/{sidecar_id}.json"
    return base + (".zst" if compressed else "")


_KNOWN = {*MEMBERS.values(), MEMBERS["io"] + ".zst"}
_TAG = re.compile(r"\.[0-9a-f]{32}(?=\.)")  # a content digest before the extension


def addressed_member(name: str, digest: str) -> str:
    """A dir package's member named by its content (`graph/mir.bin` with digest D is
    `graph/mir.D.bin`): a rewrite puts new members beside the old ones, and `rlx.json`,
    replaced last, switches from one complete set to the other."""
    folder, _, base = name.rpartition("/")
    stem, _, extension = base.partition(".")
    return f"{folder}/{stem}.{digest}.{extension}"


def is_member_name(name: str) -> bool:
    """Whether `name` is a member a package may have: a known name, a sidecar, or either
    with a content digest (`addressed_member`). `rlx.json` is never addressed."""
    if name == MEMBERS["toc"]:
        return True
    plain = _TAG.sub("", name, count=1)
    if plain in _KNOWN:
        return plain != MEMBERS["toc"]
    return re.fullmatch(r"sidecars/[A-Za-z0-9_]{1,64}\.json(\.zst)?", plain) is not None


def container_for(path: str, container: str | None) -> str:
    """The container an output path asks for: given, or `.rlxp.zip` / `.zip` -> zip, a path
    ending in `/` or an existing folder -> dir, else flat (the reference's default)."""
    import os

    if container is not None:
        return container
    lower = path.lower()
    if lower.endswith(".zip"):
        return "zip"
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        return "dir"
    return "flat"


def is_shard_name(name: str) -> bool:
    """Whether `name` is the tensor shard's member, plain or with its content digest."""
    return _TAG.sub("", name, count=1) == MEMBERS["shard"]
