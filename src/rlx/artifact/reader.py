"""`read_rlx`: validate a schema-3 file, then map it without copying.

Everything the header claims is checked before a byte of data is used: sizes, offsets,
alignment, overlaps, blob lengths against shapes and encodings, op names and attributes,
the graph's well-formedness. Constants and table rows become numpy views into one read-only
memory map (or into the decrypted buffer of an encrypted file).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from rlx.artifact.header import io_fields, read_header
from rlx.artifact.layout import ALIGN, ENCRYPTED_MAGIC, PREAMBLE, align, checksum
from rlx.artifact.memory import MemoryMode
from rlx.artifact.model import (
    ALL,
    GRAPH,
    TABLE,
    ArtifactOrigin,
    RlxFile,
    RlxIo,
    RlxMeta,
    RlxWeight,
    io_of,
)
from rlx.errors import ArtifactError, EncryptedFileError, IntegrityError, RlxError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph
from rlx.ir.ops.sources import Constant
from rlx.ir.serialize import graph_from_dict
from rlx.ir.shape import Shape
from rlx.ir.verification import verify as verify_graph
from rlx.record import dataclass, fields
from rlx.safeio import detached, map_file

if TYPE_CHECKING:
    from rlx.artifact.self_test import SelfTestSection

VERIFY_MODES = ("full", "lazy", "none")


def read_rlx(path: str | os.PathLike, *, password: str | bytes | None = None,
             verify: str = "lazy", kdf_limits=None) -> RlxFile:
    """Open a `.rlx` file (plain: mapped under a read lease, or read if small or unleasable,
    see `rlx.safeio.mapping`; encrypted: decrypted chunk by chunk)."""
    source = os.fspath(path)
    try:
        mapped = map_file(source, ArtifactError)
    except RlxError as err:
        error = err
    else:
        return read_mapped_rlx(memoryview(mapped.buffer), source, password=password,
                               verify=verify, kdf_limits=kdf_limits)
    raise detached(error)


def read_mapped_rlx(view: memoryview, source: str, *, password: str | bytes | None = None,
                    verify: str = "lazy", kdf_limits=None) -> RlxFile:
    """`read_rlx` of a file's bytes as mapped once (`open_artifact`: the bytes a signature
    was checked over); the file gets its `origin`, which engines take the weights from."""
    buffer: bytearray | memoryview
    try:
        head = bytes(view[:len(ENCRYPTED_MAGIC)])
        encrypted = head == ENCRYPTED_MAGIC
        if encrypted:
            if password is None:
                raise EncryptedFileError(
                    f"{source} is encrypted; pass a password (read_rlx(password=...), "
                    "or --password-env / --password-file on the command line)")
            from rlx.artifact import crypto

            limits = {"limits": kdf_limits} if kdf_limits is not None else {}
            buffer = crypto.decrypt_bytes(view, password, where=source, **limits)
        elif len(head) < len(ENCRYPTED_MAGIC):
            raise ArtifactError(f"{source}: too short to be an .rlx file ({len(head)} bytes)")
        else:
            if password is not None:  # not needed, but a wrong kind is a mistake to report
                from rlx.artifact.crypto import password_bytes

                password_bytes(password, f"{source}:")
            buffer = view
        file = parse_rlx(buffer, verify=verify, source=source)
        digest = bytes(memoryview(buffer)[_DIGEST]).hex()
        file.origin = ArtifactOrigin(None if encrypted else view, f"rlx:{digest}", encrypted)
        return file
    except RlxError as err:
        error = err
    raise detached(error)


_DIGEST = slice(24, 40)  # the header's checksum in the preamble: it covers every blob's


def parse_rlx(buffer, *, verify: str = "lazy", source: str = "<buffer>") -> RlxFile:
    """Validate and decode `.rlx` bytes held in any buffer (mmap, bytes, bytearray)."""
    if verify not in VERIFY_MODES:
        raise ArtifactError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
    try:
        return _Reader(memoryview(buffer).cast("B"), source).read(verify)
    except RlxError as err:
        error = err  # raised below, outside the handler: no chained context
    raise detached(error)  # its traceback would keep the parsed header alive


_NO_BYTES = np.empty(0, np.uint8)
"""The payload of every constant whose bytes are elsewhere (the weight table): one array."""
_NO_BYTES.flags.writeable = False


@dataclass
class _Blob:
    offset: int  # absolute, in the buffer
    length: int
    digest: str
    used_by: str = ""
    part: str = ""  # whose bytes: GRAPH (a constant's) or TABLE (a weight row's)
    lazy: bool = False  # checked by its user when used (the self-test), not with the weights
    checked: bool = False


class _Reader:
    def __init__(self, buf: memoryview, source: str):
        self.buf = buf
        self.source = source
        self.blobs: list[_Blob] = []
        self._bytes: np.ndarray | None = None  # the whole buffer, viewed once

    def fail(self, message: str, error: type[ArtifactError] = ArtifactError) -> NoReturn:
        raise error(f"{self.source}: {message}")

    # -- preamble and header ---------------------------------------------------------------
    def read(self, verify: str) -> RlxFile:
        header, digests, length = read_header(self.buf, self.source, self.fail,
                                              lazy_lists=True)
        data_start = align(PREAMBLE.size + length)
        # popped: the table's parsed entries are freed before the graph is built (a CNN's
        # duplex file: 276 of them, ~60 KiB at the peak of its read)
        self._blob_table(header.pop("blobs", None), data_start, digests)
        graph = self._graph(header.get("graph"))
        weights = self._weights(header.get("weights"), graph)
        self_test = self._self_test(header.get("self_test"))
        unused = [i for i, b in enumerate(self.blobs) if not b.used_by]
        if unused:
            self.fail(f"blob {unused[0]} is not referenced by any constant or weight")
        file = RlxFile(self._meta(header.get("meta")), graph, weights, self_test=self_test)
        check_declared_io(file.meta, graph, self.fail, "inputs" in header["meta"])
        if verify == "full":
            self.check_blobs()
        elif verify == "lazy":
            file.integrity_check = self.check_blobs
        return file

    def _blob_table(self, table: Any, data_start: int, digests: list[str] | None) -> None:
        """The blobs; their checksums are in the table, or in `digests` when given."""
        if not isinstance(table, list):
            self.fail("header 'blobs' must be a list")
        if digests is not None and len(digests) != len(table):
            self.fail(f"{len(digests)} blob checksums for {len(table)} blobs")
        end = 0
        for i, entry in enumerate(table):
            offset, length = _field(entry, "offset", int), _field(entry, "length", int)
            digest = _field(entry, "xxh3", str) if digests is None else digests[i]
            if offset is None or length is None or digest is None or min(offset, length) < 0:
                self.fail(f"blob {i}: needs non-negative integer offset and length and an xxh3")
            if offset % ALIGN:
                self.fail(f"blob {i}: offset {offset} is not a multiple of {ALIGN}")
            if offset < end:
                self.fail(f"blob {i}: overlaps the previous blob (offset {offset} < {end})")
            end = offset + length
            if data_start + end > len(self.buf):
                self.fail(f"blob {i}: ends at {data_start + end}, past the end of the file "
                          f"({len(self.buf)} bytes)")
            self.blobs.append(_Blob(data_start + offset, length, digest))

    def _take_blob(self, ref: Any, nbytes: int, user: str, part: str = TABLE) -> np.ndarray:
        if not isinstance(ref, dict) or "blob" not in ref:
            self.fail(f"{user}: data must be {{'blob': index or null}}")
        index = ref["blob"]
        if index is None:
            return _NO_BYTES
        if not isinstance(index, int) or isinstance(index, bool) \
                or not 0 <= index < len(self.blobs):
            self.fail(f"{user}: blob index {index!r} out of range")
        blob = self.blobs[index]
        if blob.used_by:
            self.fail(f"{user}: blob {index} is already used by {blob.used_by}")
        if blob.length != nbytes:
            self.fail(f"{user}: blob {index} holds {blob.length} bytes, {nbytes} expected")
        blob.used_by, blob.part = user, part
        if self._bytes is None:  # one view of the buffer that every blob slices: a view of
            # its own each held a memoryview of the buffer (~0.3 KiB a blob, kept by a model)
            self._bytes = np.frombuffer(self.buf, np.uint8)
            self._bytes.flags.writeable = False
        return self._bytes[blob.offset:blob.offset + blob.length]

    # -- graph, weights, meta --------------------------------------------------------------
    def _graph(self, body: Any) -> Graph:
        def decode(ref: Any, shape: Shape) -> np.ndarray:
            nbytes = shape.nbytes
            if nbytes is None:
                self.fail(f"constant with symbolic shape {shape}")
            return self._take_blob(ref, nbytes, f"constant of shape {shape}", GRAPH)

        return checked_graph(body, decode, self.fail)

    def _weights(self, rows: Any, graph: Graph) -> list[RlxWeight]:
        return weight_rows(rows, graph, self._take_blob, self.fail, "header 'weights'")

    def _self_test(self, body: Any) -> SelfTestSection | None:
        """The self-test's blob, claimed here and left lazy: neither its checksum nor its
        description is checked until the test is asked for (`SelfTestSection.load`)."""
        if body is None:
            return None
        nbytes = _field(body, "bytes", int)
        if nbytes is None or not isinstance(body.get("blob"), int):
            self.fail("header 'self_test' needs its blob and its bytes")
        index = body["blob"]
        self._take_blob(body, nbytes, "the self-test")
        blob = self.blobs[index]
        blob.lazy = True
        from rlx.artifact.self_test import SelfTestSection  # only a file that has one needs it

        return SelfTestSection(body, self.buf[blob.offset:blob.offset + blob.length],
                               blob.digest, self.source)

    def _meta(self, body: Any) -> RlxMeta:
        if not isinstance(body, dict):
            self.fail("header 'meta' must be an object")
        values = {}
        for f in fields(RlxMeta):
            if f.name not in body:
                continue
            value = body[f.name]
            if f.name in ("inputs", "outputs"):
                value = [self._io(v) for v in (value if isinstance(value, list) else [None])]
            elif f.name == "precision_plan":
                from rlx.artifact.precision import PrecisionPlan  # a fast bake's files only

                PrecisionPlan.from_json(value, self.fail)
            elif f.name == "params_remaining":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    self.fail("meta.params_remaining must be a list of names")
            elif not isinstance(value, int if f.type == "int" else str) \
                    or isinstance(value, bool):
                self.fail(f"meta.{f.name} has the wrong type")
            values[f.name] = value
        if not isinstance(values.get("name"), str):
            self.fail("meta.name is missing")
        modes = [m.value for m in MemoryMode]
        if values.get("memory_mode", modes[0]) not in modes:
            self.fail(f"meta.memory_mode {str(values['memory_mode'])[:40]!r} is not one of "
                      f"{', '.join(modes)}")
        return RlxMeta(**values)

    def _io(self, value: Any) -> RlxIo:
        return RlxIo(*io_fields(value, self.fail))

    # -- integrity -------------------------------------------------------------------------
    def check_blobs(self, part: str = ALL) -> bool:
        """Check the blobs of `part` (`RlxFile.check_integrity`) not checked yet, each once;
        whether every blob now is."""
        for i, blob in enumerate(self.blobs):
            if blob.lazy or blob.checked or part not in (ALL, blob.part):
                continue
            data = self.buf[blob.offset:blob.offset + blob.length]
            if checksum(data) != blob.digest:
                self.fail(f"checksum mismatch in blob {i} ({blob.used_by}): the file is corrupt",
                          IntegrityError)
            blob.checked = True
        return all(blob.lazy or blob.checked for blob in self.blobs)


def _row_nbytes(encoding: str, shape: list[int]) -> int:
    """Bytes a row of `shape` takes: numel x itemsize for dtypes, whole blocks for codecs."""
    numel = 1
    for dim in shape:
        numel *= dim
    if encoding in _DTYPE_NAMES:
        return numel * DType(encoding).itemsize
    from rlx.codecs.encodings import encoded_nbytes  # a packed row's codec: float files need none

    return encoded_nbytes(encoding, numel)


_DTYPE_NAMES = {d.value for d in DType}


def _field(entry: Any, key: str, kind: type) -> Any:
    if not isinstance(entry, dict):
        return None
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        return None
    return value


def text_field(row: dict, key: str, default: str) -> str:
    """A row's text, interned: encodings, dtypes, layouts and notes repeat row after row."""
    value = row.get(key, default)
    return sys.intern(value) if isinstance(value, str) else default





def weight_rows(rows: Any, graph: Graph, take: Callable[[dict, int, str], np.ndarray],
                fail: Callable[[str], NoReturn], where: str,
                check: Callable[[dict, RlxWeight], None] | None = None) -> list[RlxWeight]:
    """The weight table of a header, each row checked against `graph`; `take(row, nbytes,
    what)` gives a row's bytes, `check` is the container's own test of a row (shared by
    the `.rlx` and `.rlxp` readers)."""
    if not isinstance(rows, (list, Iterator)):  # a header read lazily: an iterator
        fail(f"{where} must be a list")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            fail(f"weight {i} must be an object")
        name = _field(row, "name", str)
        name = name if name is None else sys.intern(name)  # its constant's name, as read
        shape = _field(row, "shape", list)
        encoding = _field(row, "encoding", str)
        if name is None or shape is None or encoding is None or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            fail(f"weight {i}: needs a name, an encoding and a shape of sizes >= 0")
        node_id = row.get("node_id")
        if node_id is not None and (not isinstance(node_id, int) or isinstance(node_id, bool)
                                    or not 0 <= node_id < len(graph)
                                    or not isinstance(graph.node(node_id).op, Constant)):
            fail(f"weight {name!r}: node_id {node_id!r} is not a constant of the graph")
        try:
            nbytes = _row_nbytes(encoding, shape)
        except RlxError as err:
            fail(f"weight {name!r}: {err}")
        weight = RlxWeight(
            name, tuple(shape), text_field(row, "dtype", encoding), sys.intern(encoding),
            take(row, nbytes, f"weight {name!r}"), note=text_field(row, "note", ""),
            layout=text_field(row, "layout", "row_major"), node_id=node_id,
            row_aligned=bool(row.get("row_aligned", True)))
        if check is not None:
            check(row, weight)
        out.append(weight)
    return out


def check_declared_io(meta: RlxMeta, graph: Graph, fail: Callable[[str], NoReturn],
                      declared: bool = True) -> None:
    """The inputs and outputs the header's meta declares must be the graph's (names, dims,
    dtypes, order): a load that reads only the header (`rlx.engines.warm`) must see the
    model the full load sees. A header that declares none (`declared` False), or a file
    with no graph (a weight-only package), has nothing to disagree with."""
    if not declared or not len(graph):
        return
    for kind, graph_io in (
            ("inputs", [io_of(n.source_name, n.tensor_shape) for n in graph.inputs()]),
            ("outputs", [io_of(graph.node(o).name or f"out{o}", graph.node(o).tensor_shape)
                         for o in graph.outputs])):
        said = getattr(meta, kind)
        if said != graph_io:
            first = next((f"{a.name} {list(a.shape)} {a.dtype} where the graph has "
                          f"{b.name} {list(b.shape)} {b.dtype}"
                          for a, b in zip(said, graph_io) if a != b),
                         f"{len(said)} where the graph has {len(graph_io)}")
            fail(f"meta.{kind} disagree with the graph: {first}")


def checked_graph(body: Any, decode: Callable[[Any, Shape], np.ndarray],
                  fail: Callable[[str], NoReturn]) -> Graph:
    """The verified graph of a freshly parsed header's `graph` body, whose node list it
    empties as it reads it; every way it can be malformed goes to `fail` (shared by the
    `.rlx` and `.rlxp` readers)."""
    try:
        graph = graph_from_dict(body, decode, consume=True)
        verify_graph(graph)
    except ArtifactError:
        raise
    except RlxError as err:
        fail(f"graph: {err}")
    except (RecursionError, OverflowError, ValueError, TypeError) as err:
        fail(f"graph: malformed ({type(err).__name__}: {str(err)[:200]})")
    return graph


__all__ = ["VERIFY_MODES", "check_declared_io", "checked_graph", "parse_rlx", "read_mapped_rlx",
           "read_rlx", "text_field", "weight_rows"]

