"""Mutators: byte-level havoc and splicing, and structure-aware edits that keep a file's
checksums and containers valid so the mutation reaches the checks behind them.

Everything takes an explicit `random.Random`, so a case is a pure function of its seed and
a long run can be resumed or replayed exactly. The hypothesis tests use the same
structure-aware helpers with values drawn from `hostile_json()` instead of the Random.
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import zstandard
from hypothesis import strategies as st

from rlx.artifact import crypto
from rlx.artifact.layout import MAGIC, PREAMBLE, align, checksum, header_digest
from rlx.errors import RlxError
from tests.hardening import seeds

# Integers that sit on the edges parsers get wrong: signedness, widths, float precision.
EDGE_INTS = (0, 1, 2, 3, 7, 8, 63, 64, 65, 127, 128, 255, 256, 1023, 1024, 4095, 4096,
             65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**53 + 1, 2**62,
             2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**100)
def _chain(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


EDGE_VALUES: tuple[Any, ...] = (
    *EDGE_INTS, *(-v for v in EDGE_INTS[1:12]), -(2**63), None, True, False, 0.5, -0.0,
    1e308, float("nan"), float("inf"), "", "x", "f32", "gguf_q8_0", "..", "Constant", [],
    [0], [-1], [2**62, 2**62], [[[]]], {}, {"blob": 0}, {"dims": [1], "dtype": "f32"},
    "\ud800", "x\udcff", "sideways",  # lone surrogates (no character); an unknown enum value
    _chain(60),  # deep, within the header's 64 levels
)
Path = tuple[Any, ...]


# -- byte level ----------------------------------------------------------------------------
def _flip_bit(rng: random.Random, data: bytearray) -> None:
    if data:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def _set_byte(rng: random.Random, data: bytearray) -> None:
    if data:
        data[rng.randrange(len(data))] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))


def _set_word(rng: random.Random, data: bytearray) -> None:
    width = rng.choice((4, 8))
    if len(data) >= width:
        at = rng.randrange(len(data) - width + 1)
        value = rng.choice(EDGE_INTS) % (1 << 8 * width)
        data[at:at + width] = value.to_bytes(width, "little")


def _truncate(rng: random.Random, data: bytearray) -> None:
    del data[rng.randrange(len(data) + 1):]


def _insert(rng: random.Random, data: bytearray) -> None:
    at = rng.randrange(len(data) + 1)
    if data and rng.random() < 0.5:  # repeat a piece of the file: plausible-looking bytes
        start = rng.randrange(len(data))
        piece = data[start:start + rng.randrange(1, 256)]
    else:
        piece = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
    data[at:at] = piece


def _delete(rng: random.Random, data: bytearray) -> None:
    if data:
        start = rng.randrange(len(data))
        del data[start:start + rng.randrange(1, 64)]


BYTE_MUTATORS: tuple[Callable[[random.Random, bytearray], None], ...] = (
    _flip_bit, _flip_bit, _set_byte, _set_word, _truncate, _insert, _delete)


def structured(rng: random.Random, data: bytes, edit: Callable[..., bytes]) -> bytes:
    """`edit(rng, data)`, or byte havoc when `data` (a corpus case) lacks the structure the
    edit expects."""
    try:
        return edit(rng, data)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, struct.error,
            RecursionError):  # a corpus case nested deeper than the parser recurses
        return havoc(rng, data)


def havoc(rng: random.Random, data: bytes, rounds: int | None = None) -> bytes:
    """1 to 4 (or `rounds`) random byte-level edits."""
    out = bytearray(data)
    for _ in range(rounds or rng.choice((1, 1, 1, 2, 3, 4))):
        rng.choice(BYTE_MUTATORS)(rng, out)
    return bytes(out)


def splice(rng: random.Random, a: bytes, b: bytes) -> bytes:
    """The start of one valid file joined to the end of another."""
    return a[:rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1):]


# -- JSON structure ------------------------------------------------------------------------
def json_paths(value: Any, prefix: Path = ()) -> list[Path]:
    """Every position in a decoded JSON document (the root excluded)."""
    out = []
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        out.append(prefix + (key,))
        out.extend(json_paths(child, prefix + (key,)))
    return out


def replace_at(document: Any, path: Path, value: Any) -> Any:
    """A deep copy of `document` with the value at `path` replaced."""
    out = copy.deepcopy(document)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return out


def delete_at(document: Any, path: Path) -> Any:
    out = copy.deepcopy(document)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return out


def random_json(rng: random.Random, depth: int = 0) -> Any:
    """An edge value, or now and then a small random container of them."""
    if depth < 2 and rng.random() < 0.15:
        items = [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
        return items if rng.random() < 0.5 else {f"k{i}": v for i, v in enumerate(items)}
    if rng.random() < 0.2:
        return rng.randrange(-(2**64), 2**64)
    return copy.deepcopy(rng.choice(EDGE_VALUES))


def mutate_json(rng: random.Random, document: Any) -> Any:
    """One field wrong: replaced by an edge value, deleted, or swapped with another field."""
    paths = json_paths(document)
    if not paths:
        return random_json(rng)
    path = rng.choice(paths)
    action = rng.random()
    if action < 0.6:
        return replace_at(document, path, random_json(rng))
    if action < 0.75:
        return delete_at(document, path)
    other = rng.choice(paths)
    try:
        donor = document
        for key in other:
            donor = donor[key]
        return replace_at(document, path, copy.deepcopy(donor))
    except (KeyError, IndexError, TypeError):
        return replace_at(document, path, random_json(rng))


def hostile_json() -> st.SearchStrategy:
    """Hypothesis: edge values, arbitrary scalars and small nested containers of them."""
    scalars = st.one_of(st.sampled_from(EDGE_VALUES), st.integers(), st.none(), st.booleans(),
                        st.floats(), st.text(max_size=12))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=6), inner, max_size=3), max_leaves=6)


# -- the .rlx container --------------------------------------------------------------------
ZSTD_HEADER = 1  # flag bit 0: the header region is compressed (docs/format.md)


def split_rlx(data: bytes) -> tuple[dict, bytes]:
    """A valid artifact's header (decoded; a compressed one's checksums put back in its
    blob table, as a plain header has them) and its data section."""
    _, _, flags, length, _ = PREAMBLE.unpack_from(data)
    region = data[PREAMBLE.size:PREAMBLE.size + length]
    if not flags & ZSTD_HEADER:
        return json.loads(region), data[align(PREAMBLE.size + length):]
    (count,) = struct.unpack_from("<I", region)
    header = json.loads(zstandard.ZstdDecompressor().decompress(region[4 + 16 * count:]))
    for i, entry in enumerate(header["blobs"]):
        entry["xxh3"] = region[4 + 16 * i:20 + 16 * i].hex()
    return header, data[align(PREAMBLE.size + length):]


def zstd_region(header: Any) -> bytes:
    """`header` as a compressed header region, written from docs/format.md: the blob count,
    each blob's checksum, one zstd frame of the JSON without them. An edited header keeps
    what it can: a checksum that is not 32 hex digits is written as zeros."""
    header = copy.deepcopy(header)
    blobs = header.get("blobs") if isinstance(header, dict) else None
    digests = []
    for entry in blobs if isinstance(blobs, list) else []:
        digest = entry.pop("xxh3", None) if isinstance(entry, dict) else None
        try:
            digests.append(bytes.fromhex(digest)[:16].ljust(16, b"\0"))
        except (TypeError, ValueError):
            digests.append(bytes(16))
    frame = zstandard.ZstdCompressor().compress(json.dumps(header).encode())
    return struct.pack("<I", len(digests)) + b"".join(digests) + frame


def build_rlx(header: Any, data: bytes, flags: int = 0) -> bytes:
    """An artifact around any header (a document, or the region's bytes as they are), with
    a correct header checksum and padding; `flags` with `ZSTD_HEADER` compresses a document."""
    if isinstance(header, bytes):
        text = header
    else:
        text = zstd_region(header) if flags & ZSTD_HEADER else json.dumps(header).encode()
    preamble = PREAMBLE.pack(MAGIC, 3, flags, len(text), header_digest(text))
    return preamble + text + bytes(align(PREAMBLE.size + len(text)) - PREAMBLE.size
                                   - len(text)) + data


def rlx_structural(rng: random.Random, data: bytes) -> bytes:
    """One header field wrong, or header text damaged (for a compressed header: its JSON,
    or the region itself: count, checksums, frame), checksum fixed; data kept."""
    header, body = split_rlx(data)
    flags = PREAMBLE.unpack_from(data)[2]
    choice = rng.random()
    if choice < 0.75:
        return build_rlx(mutate_json(rng, header), body, flags)
    if flags & ZSTD_HEADER and choice < 0.85:
        return build_rlx(havoc(rng, zstd_region(header)), body, flags)
    return build_rlx(havoc(rng, json.dumps(header).encode()), body)


def rlx_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    """A mutated artifact: byte havoc, a splice or a structural edit; for an encrypted
    seed, damage to its container or a damaged plaintext in a valid container."""
    seed = rng.choice(pool)
    if not seed.startswith(crypto.ENC_MAGIC):
        return _plain_case(rng, seed, pool)
    if rng.random() < 0.5:
        return encrypted_case(rng, [seed])
    try:
        plain = bytes(crypto.decrypt_bytes(seed, seeds.PASSWORD))
    except RlxError:  # a damaged container from the corpus: damage it further
        return havoc(rng, seed)
    return seeds.encrypt(_plain_case(rng, plain, pool))


def rlx_blob_edit(rng: random.Random, data: bytes) -> bytes:
    """Damage inside one blob, its checksum updated: garbage values that every verify mode
    accepts reach the kernels (indices, trip counts, quantization scales)."""
    header, body = split_rlx(data)
    blobs = [b for b in header["blobs"] if b["length"]]
    if not blobs:
        return havoc(rng, data)
    blob = rng.choice(blobs)
    piece = bytearray(body[blob["offset"]:blob["offset"] + blob["length"]])
    for _ in range(rng.choice((1, 1, 2, 4))):
        rng.choice((_flip_bit, _set_byte, _set_word))(rng, piece)
    blob["xxh3"] = checksum(piece)
    body = body[:blob["offset"]] + bytes(piece) + body[blob["offset"] + len(piece):]
    return build_rlx(header, body, PREAMBLE.unpack_from(data)[2])


def _plain_case(rng: random.Random, seed: bytes, pool: Sequence[bytes]) -> bytes:
    choice = rng.random()
    if choice < 0.4 and _parses(seed):
        return structured(rng, seed, rlx_structural)
    if choice < 0.55 and _parses(seed):
        return structured(rng, seed, rlx_blob_edit)
    if choice < 0.62:
        return splice(rng, seed, rng.choice(pool))
    return havoc(rng, seed)


def _parses(data: bytes) -> bool:
    try:
        header, _ = split_rlx(data)
    except (ValueError, struct.error, RecursionError, zstandard.ZstdError):
        return False
    return data.startswith(MAGIC) and isinstance(header, dict)


# -- RLXENC01 ------------------------------------------------------------------------------
ENC_FIELDS = ((8, 4), (12, 4), (16, 4), (20, 4), (24, 4), (44, 4), (48, 8))  # offset, width


def set_field(data: bytes, offset: int, width: int, value: int) -> bytes:
    return data[:offset] + (value % (1 << 8 * width)).to_bytes(width, "little") + \
        data[offset + width:]


def encrypted_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    seed = rng.choice(pool)
    if rng.random() < 0.4 and len(seed) >= crypto.HEADER_SIZE:
        offset, width = rng.choice(ENC_FIELDS)
        return set_field(seed, offset, width, rng.choice(EDGE_INTS))
    return havoc(rng, seed)


# -- weight files --------------------------------------------------------------------------
def safetensors_structural(rng: random.Random, data: bytes) -> bytes:
    """One header field wrong; the data section kept."""
    length = int.from_bytes(data[:8], "little")
    if 8 + length > len(data):
        raise ValueError("no complete header")
    text = json.dumps(mutate_json(rng, json.loads(data[8:8 + length]))).encode()
    return len(text).to_bytes(8, "little") + text + data[8 + length:]


def safetensors_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    seed = rng.choice(pool)
    if rng.random() < 0.5:
        return structured(rng, seed, safetensors_structural)
    return havoc(rng, seed) if rng.random() < 0.85 else splice(rng, seed, rng.choice(pool))


NPY_EDITS = ("'descr': '|O'", "'descr': '<U4'", "'descr': 'V8'", "'descr': [('a', '<f4')]",
             "'descr': '>f8'", "'descr': '<c8'", "'shape': (4611686018427387904, 2)",
             "'shape': (-1,)", "'shape': ()", "'shape': (0, 9223372036854775807)",
             "'shape': (3, 4, 5, 6, 7)", "'fortran_order': True", "'fortran_order': 1",
             "'bogus': 1")


def npy_header_edit(rng: random.Random, member: bytes) -> bytes:
    """Swap one entry of an .npy header dict (kept the same length when it fits)."""
    end = member.find(b"}")
    if not member.startswith(b"\x93NUMPY") or end < 0:
        return havoc(rng, member)
    text = member[10:end].decode("latin-1")
    key = rng.choice(("descr", "shape", "fortran_order", "bogus"))
    start = text.find(f"'{key}':")
    edit = rng.choice([e for e in NPY_EDITS if e.startswith(f"'{key}'")] or NPY_EDITS)
    if start < 0:
        text = text + edit + ", "
    else:
        stop = text.find(", '", start + 1)
        stop = len(text.rstrip(", ")) if stop < 0 else stop
        text = text[:start] + edit + text[stop:]
    header = ("{" + text.strip() + "}").encode("latin-1")
    padded = header + b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return member[:8] + len(padded).to_bytes(2, "little") + padded + member[end + 1:].lstrip(
        b" ").removeprefix(b"\n")


def npy_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    seed = rng.choice(pool)
    return npy_header_edit(rng, seed) if rng.random() < 0.5 else havoc(rng, seed)


def npz_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    """Raw zip damage, or valid zips of damaged members (past the CRC checks)."""
    seed = rng.choice(pool)
    if rng.random() < 0.4:
        return havoc(rng, seed)
    try:
        members = seeds.zip_members(seed)
    except Exception:  # noqa: BLE001  (a corpus case that is no zip any more: damage it more)
        return havoc(rng, seed)
    if members:
        name = rng.choice(sorted(members))
        edit = npy_header_edit if rng.random() < 0.6 else havoc
        members[name] = edit(rng, members[name])
    if rng.random() < 0.1:
        members[rng.choice(("../evil.npy", "x", "dup.npy.npy", "a/b.npy"))] = \
            next(iter(seeds.npy_files().values()))
    return seeds.rezip(members, compressed=rng.random() < 0.5)


def gguf_fields(data: bytes) -> list[tuple[int, int]]:
    """(offset, width) of every count, length, type code, dim and offset in a GGUF header.

    A walker just good enough for the seeds (little-endian v3): it stops at the first
    thing it does not understand, which for a mutated file is fine.
    """
    fields: list[tuple[int, int]] = [(4, 4), (8, 8), (16, 8)]
    try:
        n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
        at = 24
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

        def string(at: int) -> int:
            fields.append((at, 8))
            return at + 8 + struct.unpack_from("<Q", data, at)[0]

        def value(at: int, kind: int) -> int:
            if kind == 8:
                return string(at)
            if kind == 9:
                fields.extend([(at, 4), (at + 4, 8)])
                inner, count = struct.unpack_from("<IQ", data, at)
                at += 12
                for _ in range(min(count, 64)):
                    at = value(at, inner)
                return at
            return at + sizes[kind]

        for _ in range(min(n_kv, 64)):
            at = string(at)
            fields.append((at, 4))
            kind = struct.unpack_from("<I", data, at)[0]
            at = value(at + 4, kind)
        for _ in range(min(n_tensors, 64)):
            at = string(at)
            fields.append((at, 4))
            n_dims = struct.unpack_from("<I", data, at)[0]
            fields.extend((at + 4 + 8 * i, 8) for i in range(min(n_dims, 8)))
            at += 4 + 8 * n_dims
            fields.extend([(at, 4), (at + 4, 8)])
            at += 12
    except (struct.error, KeyError):
        pass
    return [(o, w) for o, w in fields if o + w <= len(data)]


def gguf_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    seed = rng.choice(pool)
    fields = gguf_fields(seed)
    if fields and rng.random() < 0.5:
        offset, width = rng.choice(fields)
        old = int.from_bytes(seed[offset:offset + width], "little")
        value = rng.choice((*EDGE_INTS, old + 1, old - 1, old * 2, old + 64))
        return set_field(seed, offset, width, value)
    return havoc(rng, seed) if rng.random() < 0.9 else splice(rng, seed, rng.choice(pool))


# -- ONNX models ---------------------------------------------------------------------------
def _graphs(graph) -> list:
    """A graph and every subgraph in it, depth first."""
    out = [graph]
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                out.extend(_graphs(sub))
    return out


def _wrong_dims(rng: random.Random, model) -> None:
    values = [v for g in _graphs(model.graph) for v in (*g.input, *g.output, *g.value_info)]
    dims = [d for v in values for d in v.type.tensor_type.shape.dim]
    if dims:
        dim = rng.choice(dims)
        if rng.random() < 0.8:
            dim.dim_value = rng.choice(EDGE_INTS[:-3]) * rng.choice((1, -1)) % 2**63
        else:
            dim.dim_param = rng.choice(("", "n", "?", "batch"))
    elif values:
        rng.choice(values).type.tensor_type.shape.dim.add().dim_value = rng.choice(EDGE_INTS[:-4])


def _missing_input(rng: random.Random, model) -> None:
    graph = rng.choice(_graphs(model.graph))
    choice = rng.random()
    if choice < 0.3 and graph.input:
        del graph.input[rng.randrange(len(graph.input))]
    elif choice < 0.6 and graph.initializer:
        del graph.initializer[rng.randrange(len(graph.initializer))]
    elif graph.node:
        node = rng.choice(graph.node)
        if node.input:
            node.input[rng.randrange(len(node.input))] = rng.choice(("nowhere", "", "x"))


def _cycle(rng: random.Random, model) -> None:
    """A node reads an output of itself or of a later node."""
    graph = rng.choice(_graphs(model.graph))
    if len(graph.node) >= 1:
        early = rng.randrange(len(graph.node))
        late = graph.node[rng.randrange(early, len(graph.node))]
        if graph.node[early].input and late.output:
            graph.node[early].input[0] = late.output[0]


def _huge_attribute(rng: random.Random, model) -> None:
    from onnx import AttributeProto, TensorProto, helper

    nodes = [n for g in _graphs(model.graph) for n in g.node]
    if not nodes:
        return
    node = rng.choice(nodes)
    choice = rng.random()
    if node.attribute and choice < 0.5:
        attr = rng.choice(node.attribute)
        if attr.type == AttributeProto.INT:
            attr.i = rng.choice(EDGE_INTS[:-4]) * rng.choice((1, -1))
        elif attr.type == AttributeProto.INTS:
            attr.ints.extend([rng.choice(EDGE_INTS[:-4])] * rng.choice((1, 7, 5000)))
        elif attr.type == AttributeProto.FLOAT:
            attr.f = rng.choice((float("nan"), float("inf"), -1e38, 0.0))
        else:
            attr.type = rng.choice(list(AttributeProto.AttributeType.values()))
    elif choice < 0.8:
        name = rng.choice(("axis", "axes", "perm", "kernel_shape", "pads", "strides", "to",
                           "group", "dilations", "keepdims", "batch_dims", "repeats"))
        value = rng.choice((2**62, -(2**62), [2**40] * 4, [0] * 5000, [-1, -1], 0.5, "x"))
        node.attribute.append(helper.make_attribute(name, value))
    else:  # a tensor attribute declaring far more than it holds
        tensor = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[2**40, 2**40])
        node.attribute.append(helper.make_attribute("value", tensor))


def _lying_initializer(rng: random.Random, model) -> None:
    inits = [t for g in _graphs(model.graph) for t in g.initializer]
    if not inits:
        return
    tensor = rng.choice(inits)
    choice = rng.random()
    if choice < 0.3:
        if tensor.dims:
            tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice(EDGE_INTS[:-4])
        else:
            tensor.dims.append(rng.choice((2, 2**31, 2**62)))
    elif choice < 0.5:
        tensor.raw_data = tensor.raw_data[:rng.randrange(len(tensor.raw_data) + 1)]
    elif choice < 0.65:
        tensor.data_type = rng.randrange(0, 26)
    elif choice < 0.75:
        tensor.float_data.extend([1.0] * rng.randrange(1, 9))
    else:
        _external(rng, tensor)


def _external(rng: random.Random, tensor) -> None:
    """External data at places a model may not point to, or beyond the file."""
    from onnx import TensorProto

    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    location = rng.choice(("/etc/hostname", "../outside.bin", "sub/../../weights.bin",
                           "link.bin", "weights.bin", "./weights.bin", "C:\\x.bin", "",
                           "weights.bin\0.txt", "missing.bin", "."))
    entries = {"location": location}
    if rng.random() < 0.7:
        entries["offset"] = str(rng.choice((0, 4, 64, 255, -8, 2**62, 2**64)))
    if rng.random() < 0.7:
        entries["length"] = str(rng.choice((0, 16, 64, 256, -1, 2**62)))
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)


def _renamed_op(rng: random.Random, model) -> None:
    nodes = [n for g in _graphs(model.graph) for n in g.node]
    if nodes:
        node = rng.choice(nodes)
        node.op_type = rng.choice(("Conv", "Relu", "If", "Loop", "Scan", "Reshape", "Gather",
                                   "NoSuchOp", "LSTM", "Resize", "TopK", "Pad", "Split"))


def _opset(rng: random.Random, model) -> None:
    if model.opset_import:
        model.opset_import[0].version = rng.choice((0, 1, 6, 7, 99, 2**62))
        if rng.random() < 0.2:
            model.opset_import[0].domain = rng.choice(("ai.onnx.ml", "x", "ai.onnx"))


def nest_subgraphs(model, depth: int, prefix: str = ""):
    """The model's graph wrapped in `depth` levels of If (the other branch is the original
    graph each time, so the size grows linearly): a recursion bomb. Nesting a nested model
    again (another `prefix` for the new conditions) makes its size quadratic in the depth."""
    from onnx import GraphProto, TensorProto, helper

    base = GraphProto()
    base.CopyFrom(model.graph)
    inputs = list(base.input)
    del base.input[:]  # branches take no inputs: they read the outer scope
    inner = base
    for level in range(depth):
        outputs = [helper.make_tensor_value_info(f"{o.name}_{prefix}{level}",
                                                 o.type.tensor_type.elem_type, None)
                   for o in base.output]
        node = helper.make_node("If", [f"c{prefix}{level}"], [o.name for o in outputs],
                                then_branch=inner, else_branch=_renamed_outputs(base, inner))
        inputs.append(helper.make_tensor_value_info(f"c{prefix}{level}", TensorProto.BOOL, []))
        inner = helper.make_graph([node], f"level{prefix}{level}", [], outputs)
    inner.input.extend(inputs)
    model.graph.CopyFrom(inner)
    return model


def _renamed_outputs(base, like):
    """`base` producing its outputs under the names `like` produces them."""
    from onnx import GraphProto, helper

    out = GraphProto()
    out.CopyFrom(base)
    for target, source in zip(like.output, base.output):
        out.node.append(helper.make_node("Identity", [source.name], [target.name]))
    del out.output[:]
    out.output.extend(like.output)
    return out


def _deep_nesting(rng: random.Random, model) -> None:
    from google.protobuf.message import DecodeError

    with contextlib.suppress(DecodeError):  # protobuf itself refuses to nest ~33 levels
        nest_subgraphs(model, rng.choice((2, 8, 20, 40)))


ONNX_EDITS = (_wrong_dims, _missing_input, _cycle, _huge_attribute, _lying_initializer,
              _renamed_op, _opset, _deep_nesting)


def onnx_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    """A damaged protobuf, or a valid protobuf of a damaged model."""
    from google.protobuf.message import DecodeError
    from onnx import ModelProto

    seed = rng.choice(pool)
    if rng.random() < 0.35:
        return havoc(rng, seed) if rng.random() < 0.9 else splice(rng, seed, rng.choice(pool))
    try:
        model = ModelProto.FromString(seed)
    except DecodeError:  # a corpus case that is no protobuf any more
        return havoc(rng, seed)
    for _ in range(rng.choice((1, 1, 2))):
        rng.choice(ONNX_EDITS)(rng, model)
    return model.SerializeToString()


# -- .rlxp packages ------------------------------------------------------------------------
def split_rlxp(data: bytes) -> tuple[dict, bytes]:
    """A valid flat package's TOC (decoded) and its data region."""
    toc_len = struct.unpack_from("<Q", data, 16)[0]
    toc = json.loads(data[24:24 + toc_len])
    return toc, data[align(24 + toc_len + 16):]


def build_rlxp(toc: dict | bytes, data: bytes) -> bytes:
    """A flat package around any TOC, with a correct TOC digest and padding."""
    text = toc if isinstance(toc, bytes) else json.dumps(toc).encode()
    head = struct.pack("<8sIIQ", b"RLXPFLAT", 2, 5, len(text)) + text + header_digest(text)
    return head + bytes(align(len(head)) - len(head)) + data


def rlxp_structural(rng: random.Random, data: bytes) -> bytes:
    """One TOC field wrong, or the TOC text damaged, its digest fixed; data kept."""
    toc, body = split_rlxp(data)
    if rng.random() < 0.75:
        return build_rlxp(mutate_json(rng, toc), body)
    return build_rlxp(havoc(rng, json.dumps(toc).encode()), body)


def rlxp_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    """A mutated package: byte havoc, a splice, or (flat seeds) a structural TOC edit."""
    seed = rng.choice(pool)
    choice = rng.random()
    if seed.startswith(b"RLXPFLAT") and choice < 0.5:
        with contextlib.suppress(ValueError, struct.error):
            return rlxp_structural(rng, seed)
    if choice < 0.65:
        return splice(rng, seed, rng.choice(pool))
    return havoc(rng, seed)


def dduf_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    """Raw archive damage, or a valid STORE archive of damaged members: a safetensors
    header field wrong, bytes havocked, a member added under a name DDUF forbids."""
    seed = rng.choice(pool)
    if rng.random() < 0.35:
        return havoc(rng, seed) if rng.random() < 0.8 else splice(rng, seed, rng.choice(pool))
    try:
        members = seeds.zip_members(seed)
    except Exception:  # noqa: BLE001  (a corpus case that is no zip any more)
        return havoc(rng, seed)
    if members:
        name = rng.choice(sorted(members))
        body = members[name]
        if name.endswith(".safetensors") and rng.random() < 0.6:
            with contextlib.suppress(ValueError):
                body = safetensors_structural(rng, body)
        else:
            body = havoc(rng, body)
        members[name] = body
    if rng.random() < 0.1:
        members[rng.choice(("../x.json", "a/b/c.json", "x.bin", "vae/model.safetensors"))] = \
            b"{}"
    return seeds.rezip(members, compressed=rng.random() < 0.1)


# -- MLX folders (carried as a STORE zip of config.json and model.safetensors) -------------
MLX_LIES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 31, 32, 33, 64, 128, 4096, -1, -32, 2**31,
            2**63, 2**64, 4.0, 3.5, "4", None, True, [], {}, "affine", "mxfp4", "mxfp8",
            "nvfp4", "sideways")


def _mlx_config_lie(rng: random.Random, config: bytes, layers: list[str]) -> bytes:
    """`quantization` lying about bits, group size or mode, globally or for one layer."""
    body = json.loads(config)
    quant = body.get("quantization")
    if not isinstance(quant, dict) or rng.random() < 0.1:
        body["quantization"] = rng.choice((*MLX_LIES, {"bits": 4}, _chain(70)))
        return json.dumps(body).encode()
    target = quant
    if layers and rng.random() < 0.4:
        target = quant.setdefault(rng.choice(layers), {})
        if not isinstance(target, dict):
            target = quant[rng.choice(layers)] = {}
    for _ in range(rng.randint(1, 2)):
        target[rng.choice(("bits", "group_size", "mode"))] = rng.choice(MLX_LIES)
    return json.dumps(body).encode()


def _mlx_array_lie(rng: random.Random, weights: bytes) -> bytes:
    """A packed array of the wrong length, shape or dtype, or a layer's part missing."""
    from safetensors.numpy import load as load_safetensors
    from safetensors.numpy import save as save_safetensors

    tensors = dict(load_safetensors(weights))
    name = rng.choice(sorted(tensors))
    array = tensors[name]
    lie = rng.choice(("drop_col", "add_row", "flat", "deeper", "dtype", "missing", "rename",
                      "empty"))
    if lie == "drop_col" and array.ndim == 2 and array.shape[1]:
        tensors[name] = np.ascontiguousarray(array[:, :-1])
    elif lie == "add_row" and array.ndim >= 1:
        tensors[name] = np.concatenate([array, array[:1]])
    elif lie == "flat":
        tensors[name] = array.reshape(-1)
    elif lie == "deeper":
        tensors[name] = array.reshape(1, *array.shape)
    elif lie == "dtype":
        with np.errstate(all="ignore"):  # values that do not fit: the lie is the point
            tensors[name] = array.astype(rng.choice((np.uint8, np.int32, np.float64,
                                                     np.uint16, np.float16, np.uint32)))
    elif lie == "missing":
        del tensors[name]
    elif lie == "rename":
        tensors[name.replace(".", "_", 1) + rng.choice((".scales", ".weight", ".biases"))] = \
            tensors.pop(name)
    else:
        tensors[name] = array[:0]
    return save_safetensors(tensors)


def mlx_case(rng: random.Random, pool: Sequence[bytes]) -> bytes:
    """A folder whose config lies, whose packed arrays lie, whose safetensors header has one
    field wrong, or whose files are havocked; always a readable STORE zip of the folder."""
    seed = rng.choice(pool)
    try:
        members = seeds.zip_members(seed)
        config, weights = members["config.json"], members["model.safetensors"]
    except Exception:  # noqa: BLE001  (a corpus case that is no folder any more)
        return seed
    layers = [name.removesuffix(".scales") for name in _safetensors_names(weights)
              if name.endswith(".scales")]
    roll = rng.random()
    try:
        if roll < 0.4:
            config = _mlx_config_lie(rng, config, layers)
        elif roll < 0.7:
            weights = _mlx_array_lie(rng, weights)
        elif roll < 0.85:
            weights = safetensors_structural(rng, weights)
        elif rng.random() < 0.5:
            config = havoc(rng, config)
        else:
            weights = havoc(rng, weights)
    except Exception:  # noqa: BLE001  (a damaged corpus file: the edit needs a valid one)
        weights = havoc(rng, weights)
    return seeds.rezip({"config.json": config, "model.safetensors": weights},
                       compressed=False)


def _safetensors_names(data: bytes) -> list[str]:
    try:
        length = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + length])
    except ValueError:
        return []
    return sorted(header) if isinstance(header, dict) else []
