"""`read_rlxp`: validate an `.rlxp` package (flat, zip or dir), then map it without copying.

Everything the package claims is checked before its bytes are used: the flat header and the
TOC's digest (or the zip's structure and the CRC of its small members), the manifest's
format and versions, every region's offset, length, alignment and overlap, every tensor's
tier, codec, lengths against its shape and scheme, and the graph as the `.rlx` reader checks
it. Checksums of the graph, the index, sidecars and compressed tensors are checked before
they are parsed or inflated; those of hot tensors at open (`verify="full"`) or the first time
the weights are used (`"lazy"`, the default), as for `.rlx`. Hot tensors are read-only views
of the package's memory map; warm and cold ones are inflated into owned buffers.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeGuard

import numpy as np

from rlx.artifact.layout import checksum, header_digest
from rlx.artifact.model import ALL, LAYOUTS, ArtifactOrigin, RlxFile, RlxWeight
from rlx.artifact.reader import (
    VERIFY_MODES,
    _Reader,
    _row_nbytes,
    check_declared_io,
    checked_graph,
    weight_rows,
)
from rlx.artifact.rlxp import layout as L
from rlx.artifact.rlxp.zblk import TIERS, decode_tier
from rlx.errors import ArtifactError, IntegrityError, RlxError
from rlx.ir.graph import Graph
from rlx.ir.shape import Shape
from rlx.safeio import JsonLimits, load_json, map_file, map_with_file
from rlx.stored_zip import check_crc, read_stored_zip

__all__ = ["RlxpPackage", "read_mapped_dir_rlxp", "read_mapped_rlxp", "read_rlxp",
           "read_rlxp_package", "is_rlxp"]

ALIGN = 64
_SIDECAR_ID = re.compile(r"[A-Za-z0-9_]{1,64}")


@dataclass
class RlxpPackage:
    """A package as read: the `RlxFile`, its manifest, TOC rows, sidecars and container."""

    file: RlxFile
    manifest: dict[str, Any]
    tensors: list[dict[str, Any]]
    sidecars: dict[str, Any] = field(default_factory=dict)
    placement: Any = None
    container: str = "flat"


def is_rlxp(path: str | os.PathLike) -> bool:
    """Whether `path` is a package: a flat file by its magic, a zip or folder holding
    `rlx.json` (the magic of a zip is not enough: a DDUF bundle is a zip too)."""
    path = Path(path)
    if path.is_dir():
        return (path / L.MEMBERS["toc"]).is_file()
    try:
        with path.open("rb") as f:
            head = f.read(len(L.FLAT_MAGIC))
    except OSError:
        return False
    if head == L.FLAT_MAGIC:
        return True
    if head[:4] == b"PK\x03\x04":
        import zipfile

        try:
            with zipfile.ZipFile(path) as archive:
                return L.MEMBERS["toc"] in archive.namelist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            return False
    return False


def read_rlxp(path: str | os.PathLike, *, verify: str = "lazy") -> RlxFile:
    """Open a package and return its `RlxFile` (see `read_rlxp_package` for the rest)."""
    return read_rlxp_package(path, verify=verify).file


def read_rlxp_package(path: str | os.PathLike, *, verify: str = "lazy") -> RlxpPackage:
    source = os.fspath(path)
    if Path(source).is_dir():
        _check_verify(verify)
        try:
            container: _Container = _DirContainer(Path(source))
        except OSError as err:
            raise ArtifactError(f"cannot read {source}: {err.strerror or err}") from None
        return _Package(container, source).read(verify)
    try:
        with map_with_file(source, ArtifactError) as (mapped, f):  # leased: safeio
            return read_mapped_rlxp(memoryview(mapped.buffer), f, source, verify=verify)
    except OSError as err:
        raise ArtifactError(f"cannot read {source}: {err.strerror or err}") from None


def read_mapped_rlxp(buf: memoryview, f, source: str, *, verify: str = "lazy") -> RlxpPackage:
    """A flat or zip package from its bytes as mapped once and a file object on the same
    open file (`open_artifact`: the bytes a signature was checked over)."""
    _check_verify(verify)
    head = bytes(buf[:8])
    if not head:
        raise ArtifactError(f"{source}: empty file, not an .rlxp package")
    container: _Container
    if head == L.FLAT_MAGIC:
        container = _FlatContainer(buf, source)
    elif head[:4] == b"PK\x03\x04":
        container = _ZipContainer(f, buf, source)
    else:
        raise ArtifactError(f"{source}: bad magic {head!r} (expected "
                            f"{L.FLAT_MAGIC.decode()} or a zip package)")
    return _Package(container, source).read(verify)


def read_mapped_dir_rlxp(members: Mapping[str, memoryview], source: str, *,
                         verify: str = "lazy") -> RlxpPackage:
    """A dir package from its members as mapped once, by relative POSIX path
    (`open_artifact`: the bytes a signature was checked over): no member is opened by path,
    and one missing from `members` is missing from the package."""
    _check_verify(verify)
    return _Package(_DirContainer(Path(source), members), source).read(verify)


def _check_verify(verify: str) -> None:
    if verify not in VERIFY_MODES:
        raise ArtifactError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")


# -- containers: the TOC and a way to view each region -------------------------------------
class _Container:
    kind = ""
    source = ""
    toc: dict[str, Any]
    tensor_area: memoryview
    toc_raw = b""  # the TOC's bytes: they hold every tensor's checksum, so name the content

    def fail(self, message: str, error: type[ArtifactError] = ArtifactError) -> NoReturn:
        raise error(f"{self.source}: {message}")

    def region(self, row: Any, what: str) -> memoryview:
        raise NotImplementedError

    def use_shard(self, name: str) -> None:
        """Take the tensors from member `name` (zip and dir: the index names it)."""
        raise NotImplementedError

    def checked(self, row: Any, what: str) -> memoryview:
        """A region whose xxh3 must match before it is used."""
        view = self.region(row, what)
        if checksum(view) != row.get("xxh3"):
            self.fail(f"checksum mismatch in {what}: the package is corrupt", IntegrityError)
        return view

    def parse_json(self, raw, what: str) -> Any:
        """JSON within the same limits as an `.rlx` header, checked before parsing."""
        return load_json(bytes(raw), ArtifactError, f"{self.source}: {what}",
                         JsonLimits(max_depth=64))


def _int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _FlatContainer(_Container):
    kind = "flat"

    def __init__(self, buf: memoryview, source: str):
        self.buf, self.source = buf, source
        if len(buf) < L.FLAT_HEADER.size:
            self.fail(f"too short for the {L.FLAT_HEADER.size}-byte RLXPFLAT header")
        magic, version, flags, toc_len = L.FLAT_HEADER.unpack_from(buf)
        if version != L.CONTAINER_VERSION:
            self.fail(f"container version {version} is not supported (rlx reads "
                      f"{L.CONTAINER_VERSION})")
        if flags & L.FLAG_BINCODE_TOC:
            self.fail("has a bincode TOC (the Rust reference's); rlx reads JSON TOCs: "
                      "re-export the package with rlx")
        if flags != L.WRITTEN_FLAGS:
            self.fail(f"flags {flags:#x} are not {L.WRITTEN_FLAGS:#x} (hybrid storage, "
                      "TOC digest): not a package rlx wrote")
        digest = 16
        end = L.FLAT_HEADER.size + toc_len + digest
        if toc_len > L.MAX_TOC_BYTES or end > len(buf):
            self.fail(f"TOC length {toc_len} exceeds the file ({len(buf)} bytes) or the "
                      f"{L.MAX_TOC_BYTES >> 20} MiB cap")
        text = buf[L.FLAT_HEADER.size:L.FLAT_HEADER.size + toc_len]
        if digest and header_digest(bytes(text)) != bytes(buf[end - 16:end]):
            self.fail("TOC checksum mismatch: the package is corrupt", IntegrityError)
        self.toc_raw = bytes(text)
        self.toc = self.parse_json(text, "TOC")
        if not isinstance(self.toc, dict):
            self.fail("TOC is not a JSON object")
        self.start = -(-end // ALIGN) * ALIGN
        self.tensor_area = buf[min(self.start, len(buf)):]
        self._spans: list[tuple[int, int, str]] = []

    def region(self, row: Any, what: str) -> memoryview:
        offset = row.get("offset") if isinstance(row, dict) else None
        length = row.get("length") if isinstance(row, dict) else None
        if not _int(offset) or not _int(length):
            self.fail(f"{what}: needs a non-negative integer offset and length")
        if self.start + offset + length > len(self.buf):
            self.fail(f"{what}: ends at {self.start + offset + length}, past the end of the "
                      f"file ({len(self.buf)} bytes)")
        self._spans.append((offset, offset + length, what))
        return self.buf[self.start + offset:self.start + offset + length]


def _member_name_problem(name: str) -> str | None:
    return None if L.is_member_name(name) else "not a member an .rlxp package has"


class _ZipContainer(_Container):
    kind = "zip"

    def __init__(self, f, buf: memoryview, source: str):
        self.buf, self.source = buf, source
        self.members = read_stored_zip(f, len(buf), source, ArtifactError,
                                       _member_name_problem)
        self.tensor_area = memoryview(b"")
        self.toc = self._small_json(L.MEMBERS["toc"])
        if not isinstance(self.toc, dict):
            self.fail("rlx.json is not a JSON object")

    def use_shard(self, name: str) -> None:
        shard = self.members.get(name)
        self.tensor_area = self.buf[shard.offset:shard.offset + shard.length] if shard \
            else memoryview(b"")
        if shard and shard.offset % ALIGN:
            self.fail(f"member {shard.name!r} is not {ALIGN}-byte aligned in the archive")

    def _small_json(self, name: str) -> Any:
        member = self.members.get(name)
        if member is None:
            self.fail(f"has no {name} member")
        if member.length > L.MAX_TOC_BYTES:
            self.fail(f"member {name} is larger than {L.MAX_TOC_BYTES >> 20} MiB")
        check_crc(self.buf, member, self.source, IntegrityError)
        raw = self.buf[member.offset:member.offset + member.length]
        if name == L.MEMBERS["toc"]:
            self.toc_raw = bytes(raw)
        return self.parse_json(raw, name)

    def region(self, row: Any, what: str) -> memoryview:
        name = row.get("member") if isinstance(row, dict) else None
        member = self.members.get(name) if isinstance(name, str) else None
        if member is None:
            self.fail(f"{what}: names no member of the archive ({name!r})")
        if row.get("length") != member.length:
            self.fail(f"{what}: member {name} holds {member.length} bytes, "
                      f"{row.get('length')!r} declared")
        return self.buf[member.offset:member.offset + member.length]


class _DirContainer(_Container):
    """Members mapped by path as they are used, or taken from `members` (mapped already)."""

    kind = "dir"

    def __init__(self, folder: Path, members: Mapping[str, memoryview] | None = None):
        self.folder, self.source, self.members = folder, str(folder), members
        self.tensor_area = memoryview(b"")
        self.toc_raw = bytes(self._map(L.MEMBERS["toc"]))
        self.toc = self.parse_json(self.toc_raw, "rlx.json")
        if not isinstance(self.toc, dict):
            self.fail("rlx.json is not a JSON object")

    def use_shard(self, name: str) -> None:
        present = (self.folder / name).exists() if self.members is None \
            else name in self.members
        self.tensor_area = self._map(name) if present else memoryview(b"")

    def _map(self, name: str) -> memoryview:
        if self.members is None:
            return memoryview(map_file(self.folder / name, ArtifactError).buffer)  # leased
        view = self.members.get(name)
        if view is None:
            self.fail(f"has no member {name}")
        return view

    def region(self, row: Any, what: str) -> memoryview:
        name = row.get("member") if isinstance(row, dict) else None
        if not isinstance(name, str) or _member_name_problem(name):
            self.fail(f"{what}: names no member of a package ({name!r})")
        view = self._map(name)
        if row.get("length") != len(view):
            self.fail(f"{what}: member {name} holds {len(view)} bytes, "
                      f"{row.get('length')!r} declared")
        return view


# -- the package ---------------------------------------------------------------------------
class _Package:
    def __init__(self, container: _Container, source: str):
        self.c, self.source = container, source
        self.tensors: list[np.ndarray] = []
        self.rows: list[dict[str, Any]] = []
        self.used: list[str] = []
        self.hot_checks: list[tuple[int, memoryview]] = []

    def fail(self, message: str, error: type[ArtifactError] = ArtifactError) -> NoReturn:
        self.c.fail(message, error)

    def read(self, verify: str) -> RlxpPackage:
        toc = self.c.toc
        manifest = self._manifest(toc.get("manifest"))
        self._tensor_rows(self._rows(toc), verify)
        graph = self._graph(toc.get("graph"), manifest, toc)
        rlx = toc.get("rlx")
        if not isinstance(rlx, dict):
            self.fail("TOC has no 'rlx' object (meta and weight table)")
        weights = self._weights(rlx.get("weights"), graph)
        sidecars = self._sidecars(toc.get("sidecars"))
        placement = None
        if toc.get("placement") is not None:
            placement = self.c.parse_json(self.c.checked(toc["placement"], "placement"),
                                          "placement")
        if isinstance(self.c, _FlatContainer):
            self._no_overlaps(self.c._spans)
        unused = [self.rows[i]["name"] for i, u in enumerate(self.used) if not u]
        if unused:
            self.fail(f"tensor {unused[0]!r} is not used by any constant or weight row")
        file = RlxFile(_Reader(memoryview(b""), self.source)._meta(rlx.get("meta")), graph,
                       weights)
        check_declared_io(file.meta, graph, self.fail, "inputs" in rlx["meta"])
        key = hashlib.blake2b(self.c.toc_raw, digest_size=16).hexdigest()
        file.origin = ArtifactOrigin(None, f"rlxp:{key}")
        if self.hot_checks:
            if verify == "full":
                self._check_hot()
            elif verify == "lazy":
                file.integrity_check = self._check_hot
        return RlxpPackage(file, manifest, self.rows, sidecars, placement, self.c.kind)

    def _manifest(self, m: Any) -> dict[str, Any]:
        if not isinstance(m, dict) or m.get("format") != L.FORMAT:
            self.fail("TOC has no rlxp manifest")
        compat, version = m.get("compat_version"), m.get("format_version")
        if not _int(compat) or not _int(version):
            self.fail("manifest format_version and compat_version must be integers")
        if compat > L.FORMAT_VERSION:
            self.fail(f"package needs a reader of format version {compat}; this rlx reads "
                      f"{L.FORMAT_VERSION}")
        encoding = m.get("graph_encoding")
        if encoding not in (L.GRAPH_ENCODING, L.NO_GRAPH):
            self.fail(f"graph encoding {encoding!r} is not read by rlx (it reads "
                      f"{L.GRAPH_ENCODING}); bincode graphs come from the Rust reference")
        for key in ("name", "producer", "created"):
            if not isinstance(m.get(key), str):
                self.fail(f"manifest.{key} must be a string")
        features = m.get("features")
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            self.fail("manifest.features must be a list of strings")
        return m

    def _rows(self, toc: dict) -> list:
        if isinstance(self.c, _FlatContainer):
            rows = toc.get("tensors")
        else:
            index_row = toc.get("index")
            index = self.c.parse_json(self.c.checked(index_row, "weights/index.json"),
                                      "weights/index.json") if index_row else None
            shard = index.get("shard") if isinstance(index, dict) else None
            if not isinstance(index, dict) or not isinstance(shard, str) \
                    or not L.is_shard_name(shard):
                self.fail("weights/index.json must name the shard weights/shards/000.pack.bin "
                          "(or that name with its content digest)")
            self.c.use_shard(shard)
            rows = index.get("tensors")
        if not isinstance(rows, list):
            self.fail("the tensor rows must be a list")
        return rows

    def _tensor_rows(self, rows: list, verify: str) -> None:
        area = self.c.tensor_area
        spans = []
        for i, row in enumerate(rows):
            where = f"tensor {i}"
            if not isinstance(row, dict) or not isinstance(row.get("name"), str):
                self.fail(f"{where}: must be an object with a name")
            where = f"tensor {row['name']!r}"
            shape, scheme = row.get("shape"), row.get("scheme")
            offset, stored, raw = row.get("offset"), row.get("stored_len"), row.get("raw_len")
            if not isinstance(shape, list) or not all(_int(d) for d in shape) \
                    or not isinstance(scheme, str):
                self.fail(f"{where}: needs a shape of sizes >= 0 and a scheme")
            if row.get("layout") not in LAYOUTS:
                self.fail(f"{where}: layout {row.get('layout')!r} is not one of "
                          f"{', '.join(LAYOUTS)}")
            tier, codec = row.get("tier"), row.get("codec")
            if not isinstance(tier, str) or tier not in TIERS or TIERS[tier] != codec:
                self.fail(f"{where}: tier {tier!r} with codec {codec!r} (expected hot/raw, "
                          "warm/zstd_blocks or cold/zstd)")
            if not (_int(offset) and _int(stored) and _int(raw)) \
                    or not isinstance(row.get("xxh3"), str):
                self.fail(f"{where}: needs integer offset, stored_len, raw_len and an xxh3")
            if offset % ALIGN:
                self.fail(f"{where}: offset {offset} is not a multiple of {ALIGN}")
            if tier == "hot" and stored != raw:
                self.fail(f"{where}: a hot tensor's stored_len {stored} must equal its "
                          f"raw_len {raw}")
            try:
                need = _row_nbytes(scheme, shape)
            except RlxError as err:
                self.fail(f"{where}: {err}")
            if need != raw:
                self.fail(f"{where}: {scheme}{shape} takes {need} bytes, raw_len says {raw}")
            if offset + stored > len(area):
                self.fail(f"{where}: ends at {offset + stored}, past the tensor data "
                          f"({len(area)} bytes)")
            spans.append((offset, offset + stored, where))
            view = area[offset:offset + stored]
            if tier == "hot":
                self.hot_checks.append((i, view))
            elif checksum(view) != row["xxh3"]:
                self.fail(f"checksum mismatch in {where}: the package is corrupt",
                          IntegrityError)
            self.tensors.append(decode_tier(codec, view, raw, f"{self.source}: {where}"))
            self.rows.append(row)
            self.used.append("")
        if isinstance(self.c, _FlatContainer):
            self.c._spans.extend((a + 0, b, w) for a, b, w in spans)
        else:
            self._no_overlaps(spans)

    def _no_overlaps(self, spans: list[tuple[int, int, str]]) -> None:
        spans = sorted(spans)
        for (_, end, first), (begin, _, second) in zip(spans, spans[1:]):
            if begin < end:
                self.fail(f"{second} overlaps {first}")

    def _take(self, ref: Any, nbytes: int, user: str) -> np.ndarray:
        if not isinstance(ref, dict) or "tensor" not in ref:
            self.fail(f"{user}: data must be {{'tensor': index or null}}")
        index = ref["tensor"]
        if index is None:
            return np.empty(0, np.uint8)
        if not isinstance(index, int) or isinstance(index, bool) \
                or not 0 <= index < len(self.tensors):
            self.fail(f"{user}: tensor index {index!r} out of range")
        data = self.tensors[index]
        if data.nbytes != nbytes:
            self.fail(f"{user}: tensor {self.rows[index]['name']!r} holds {data.nbytes} bytes, "
                      f"{nbytes} expected")
        self.used[index] = self.used[index] or user
        return data

    def _graph(self, row: Any, manifest: dict, toc: dict) -> Graph:
        if manifest["graph_encoding"] == L.NO_GRAPH:
            if row is not None:
                self.fail("manifest says there is no graph, the TOC has one")
            return Graph(str(manifest["name"]))
        if not isinstance(row, dict):
            self.fail("TOC 'graph' must describe the graph's bytes")
        body = self.c.parse_json(self.c.checked(row, "graph"), "graph")

        def decode(ref: Any, shape: Shape) -> np.ndarray:
            if not shape.is_static:
                self.fail(f"constant with symbolic shape {shape}")
            return self._take(ref, shape.nbytes or 0, f"constant of shape {shape}")

        return checked_graph(body, decode, self.fail)

    def _weights(self, rows: Any, graph: Graph) -> list[RlxWeight]:
        return weight_rows(rows, graph, self._take, self.fail, "rlx.weights", self._same_tensor)

    def _same_tensor(self, row: dict, weight: RlxWeight) -> None:
        index = row.get("tensor")
        if index is None:
            return
        t = self.rows[index]
        if (t["name"], t["shape"], t["scheme"], t["layout"]) != \
                (weight.name, list(weight.shape), weight.encoding, weight.layout):
            self.fail(f"weight {weight.name!r} and its tensor row disagree on name, shape, "
                      "scheme or layout")

    def _sidecars(self, rows: Any) -> dict[str, Any]:
        if not isinstance(rows, list):
            self.fail("TOC 'sidecars' must be a list")
        out: dict[str, Any] = {}
        for i, row in enumerate(rows):
            sid = row.get("id") if isinstance(row, dict) else None
            if not isinstance(sid, str) or not _SIDECAR_ID.fullmatch(sid) or sid in out:
                self.fail(f"sidecar {i}: needs a unique alphanumeric id")
            tier, codec, raw = row.get("tier"), row.get("codec"), row.get("raw_len")
            if not isinstance(tier, str) or tier not in TIERS or TIERS[tier] != codec \
                    or not _int(raw) \
                    or raw > L.MAX_TOC_BYTES:
                self.fail(f"sidecar {sid!r}: bad tier/codec/raw_len")
            stored = self.c.checked(row, f"sidecar {sid!r}")
            data = decode_tier(codec, stored, raw, f"{self.source}: sidecar {sid!r}")
            out[sid] = self.c.parse_json(data, f"sidecar {sid!r}")
        return out

    def _check_hot(self, part: str = ALL) -> bool:
        """Every mapped tensor's checksum, whatever `part` (`RlxFile.check_integrity`):
        a package's graph and table may share a tensor."""
        for index, view in self.hot_checks:
            if checksum(view) != self.rows[index]["xxh3"]:
                self.fail(f"checksum mismatch in tensor {self.rows[index]['name']!r}: the "
                          "package is corrupt", IntegrityError)
        return True



