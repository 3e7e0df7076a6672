"""`.rlxp` packages: every container and tier round-trips to the same outputs as the `.rlx`
of the same bake, and the bytes on disk are checked with independent readers: Python's
`zipfile` (and `unzip -l`), `zstandard` for the warm/cold tiers, `xxhash` for the checksums,
`struct` for the flat header."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zipfile

import numpy as np
import pytest
import xxhash
import zstandard

from rlx import BakeOptions, BakeProfile, MemoryMode, bake
from rlx.artifact import (
    open_artifact,
    read_rlx,
    read_rlxp,
    read_rlxp_package,
    write_rlx,
    write_rlxp,
)
from rlx.errors import ArtifactError, IntegrityError
from rlx.runtime import Session
from rlx.stored_zip import write_stored_zip
from tests.hardening import seeds
from tests.hardening.harness import feeds_for

CONTAINERS = {"flat": "m.rlxp", "zip": "m.rlxp.zip", "dir": "m.rlxpdir"}
TIERS = ("hot", "warm", "cold")


def run(file):
    compiled = Session().compile(file.into_runtime_graph())
    return compiled.run(feeds_for(compiled.input_shapes))


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(a, b))


@pytest.fixture(scope="module")
def baked():
    graph, weights = seeds._mlp()
    return {(p, m): bake(graph, weights, BakeOptions.from_profile(p).replace(memory=m))[0]
            for p in (BakeProfile.EXACT, BakeProfile.SIZE) for m in MemoryMode}


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("tier", TIERS)
def test_every_container_tier_and_memory_mode_runs_like_the_rlx(baked, tmp_path, container,
                                                               tier):
    for (profile, mode), file in baked.items():
        write_rlx(tmp_path / "m.rlx", file)
        plain = read_rlx(tmp_path / "m.rlx")
        out = tmp_path / f"{profile.value}-{mode.value}-{CONTAINERS[container]}"
        assert write_rlxp(out, file, container, tier=tier, block_size=512) == container
        package = read_rlxp(out, verify="full")
        assert package.meta == plain.meta
        assert package.needs_materialize() == plain.needs_materialize()
        assert [(w.name, w.shape, w.encoding, w.layout, w.node_id, w.nbytes)
                for w in package.weights] == [(w.name, w.shape, w.encoding, w.layout,
                                               w.node_id, w.nbytes) for w in plain.weights]
        assert same(run(package), run(plain)), (profile, mode, container, tier)


def test_writes_are_deterministic_and_the_creation_time_is_the_callers(baked, tmp_path):
    file = baked[(BakeProfile.SIZE, MemoryMode.COMPACT)]
    for name in ("a.rlxp", "b.rlxp", "a.rlxp.zip", "b.rlxp.zip"):
        write_rlxp(tmp_path / name, file, tier="warm")
    assert (tmp_path / "a.rlxp").read_bytes() == (tmp_path / "b.rlxp").read_bytes()
    assert (tmp_path / "a.rlxp.zip").read_bytes() == (tmp_path / "b.rlxp.zip").read_bytes()
    write_rlxp(tmp_path / "c.rlxp", file, created="2026-12-01T10:00:00Z")
    manifest = read_rlxp_package(tmp_path / "c.rlxp").manifest
    assert manifest["created"] == "2026-12-01T10:00:00Z"
    assert read_rlxp_package(tmp_path / "a.rlxp").manifest["created"] == "1970-01-01T00:00:00Z"


def flat_parts(data: bytes):
    """The flat container parsed from the format description alone."""
    magic, version, flags, toc_len = struct.unpack_from("<8sIIQ", data)
    toc_bytes = data[24:24 + toc_len]
    digest = data[24 + toc_len:24 + toc_len + 16]
    start = -(-(24 + toc_len + 16) // 64) * 64
    return magic, version, flags, json.loads(toc_bytes), toc_bytes, digest, start


def test_flat_layout_against_struct_xxhash_and_zstandard(baked, tmp_path):
    file = baked[(BakeProfile.SIZE, MemoryMode.DUPLEX)]
    names = [w.name for w in file.weights]
    tiers = {names[0]: "warm", names[1]: "cold"}
    write_rlxp(tmp_path / "m.rlxp", file, tiers=tiers, block_size=700)
    data = (tmp_path / "m.rlxp").read_bytes()
    magic, version, flags, toc, toc_bytes, digest, start = flat_parts(data)
    assert (magic, version, flags) == (b"RLXPFLAT", 2, 1 | 4)
    assert digest == xxhash.xxh3_128_digest(toc_bytes)
    m = toc["manifest"]
    assert (m["format"], m["format_version"], m["graph_encoding"]) == ("rlxp", 2,
                                                                      "rlx-graph-json")
    assert {"strip_graph_weights", "executable_graph", "hybrid_storage", "zstd_cold",
            "zstd_blocks_warm", "dequant_matmul"} <= set(m["features"])
    graph = toc["graph"]
    assert graph["offset"] == 0  # graph bytes first
    graph_bytes = data[start:start + graph["length"]]
    assert xxhash.xxh3_128_hexdigest(graph_bytes) == graph["xxh3"]
    # every graph Constant backed by a table row is empty on disk: it names its tensor
    for node in json.loads(graph_bytes)["nodes"]:
        if node["op"] == "Constant":
            assert set(node["data"]) == {"tensor"}
    cursor = graph["length"]
    for row in toc["tensors"]:
        assert row["offset"] % 64 == 0 and row["offset"] >= cursor
        stored = data[start + row["offset"]:start + row["offset"] + row["stored_len"]]
        cursor = row["offset"] + row["stored_len"]
        assert xxhash.xxh3_128_hexdigest(stored) == row["xxh3"]
        raw = _independent_decode(row, stored)
        assert len(raw) == row["raw_len"]
        weight = file.weight(row["name"])
        if weight is not None:
            assert raw == weight.data.tobytes()
            assert row["scheme"] == weight.encoding and row["layout"] == weight.layout
            assert row["tier"] == tiers.get(row["name"], "hot")
    sidecar = toc["sidecars"][0]
    assert sidecar["id"] == "io" and sidecar["tier"] == "cold" and sidecar["offset"] >= cursor
    io = json.loads(zstandard.ZstdDecompressor().decompress(
        data[start + sidecar["offset"]:start + sidecar["offset"] + sidecar["length"]]))
    assert [i["name"] for i in io["inputs"]] == [i.name for i in file.meta.inputs]
    assert [(i["dtype"], i["shape"]) for i in io["inputs"]] == [
        (i.dtype, list(i.shape)) for i in file.meta.inputs]
    assert [o["name"] for o in io["outputs"]] == [o.name for o in file.meta.outputs]


def _independent_decode(row: dict, stored: bytes) -> bytes:
    if row["tier"] == "hot":
        assert row["codec"] == "raw"
        return stored
    if row["tier"] == "cold":
        assert row["codec"] == "zstd"
        return zstandard.ZstdDecompressor().decompress(stored)
    assert row["codec"] == "zstd_blocks"
    magic, block, raw_len, count = struct.unpack_from("<4sIQI", stored)
    assert magic == b"ZBLK" and count == -(-raw_len // block)
    at, out = 20, b""
    for _ in range(count):
        (n,) = struct.unpack_from("<I", stored, at)
        out += zstandard.ZstdDecompressor().decompress(stored[at + 4:at + 4 + n])
        at += 4 + n
    assert at == len(stored)
    return out


def test_zip_container_is_listed_by_zipfile_and_unzip(baked, tmp_path):
    file = baked[(BakeProfile.EXACT, MemoryMode.COMPACT)]
    path = tmp_path / "m.rlxp.zip"
    write_rlxp(path, file)
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None  # every CRC right
        infos = archive.infolist()
        names = [i.filename for i in infos]
        assert names == ["rlx.json", "graph/mir.bin", "graph/io.json", "weights/index.json",
                         "weights/shards/000.pack.bin"]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
        toc = json.loads(archive.read("rlx.json"))
        index = json.loads(archive.read("weights/index.json"))
        shard = archive.read("weights/shards/000.pack.bin")
        io = json.loads(archive.read("graph/io.json"))
    assert toc["manifest"]["format"] == "rlxp" and io["inputs"][0]["name"] == "x"
    for row in index["tensors"]:
        stored = shard[row["offset"]:row["offset"] + row["stored_len"]]
        assert xxhash.xxh3_128_hexdigest(stored) == row["xxh3"]
    raw = path.read_bytes()
    for info in infos:  # member data is 64-byte aligned in the archive (zero-copy maps)
        name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
        assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0
        extra = raw[info.header_offset + 30 + name_len:][:extra_len]
        ids, at = [], 0
        while at < len(extra):
            kind, size = struct.unpack_from("<HH", extra, at)
            ids.append(kind)
            at += 4 + size
        assert 0x0001 in ids  # a ZIP64 extended-information field on every member
    if shutil.which("unzip"):
        listing = subprocess.run(["unzip", "-l", str(path)], capture_output=True, text=True,
                                 check=True).stdout
        assert "weights/shards/000.pack.bin" in listing and "rlx.json" in listing


def test_dir_container_holds_the_same_members(baked, tmp_path):
    """The zip's members, each but rlx.json named by its content's digest (xxh3-128 before
    the extension); the same bytes, but in rlx.json and the index, which name them."""
    file = baked[(BakeProfile.EXACT, MemoryMode.DUPLEX)]
    write_rlxp(tmp_path / "pkg", file, "dir")
    write_rlxp(tmp_path / "m.rlxp.zip", file)
    files = {re.sub(r"\.[0-9a-f]{32}\.", ".", name, count=1): name for name in (
        p.relative_to(tmp_path / "pkg").as_posix() for p in (tmp_path / "pkg").rglob("*")
        if p.is_file())}
    with zipfile.ZipFile(tmp_path / "m.rlxp.zip") as archive:
        assert sorted(files) == sorted(archive.namelist())
        for plain, name in files.items():
            data = (tmp_path / "pkg" / name).read_bytes()
            if plain not in ("rlx.json", "weights/index.json"):
                assert data == archive.read(plain)
            if plain not in ("rlx.json", "weights/shards/000.pack.bin"):
                assert name == plain.replace(".", f".{xxhash.xxh3_128_hexdigest(data)}.", 1)


def test_open_artifact_goes_by_content(baked, tmp_path):
    file = baked[(BakeProfile.SIZE, MemoryMode.RUNTIME)]
    expected = run(file)
    write_rlx(tmp_path / "plain.bin", file)
    write_rlx(tmp_path / "secret.bin", file, password="pw", kdf=seeds.FAST_KDF)
    write_rlxp(tmp_path / "pkg.bin", file, "flat")
    write_rlxp(tmp_path / "pkg.zip", file)
    write_rlxp(tmp_path / "pkgdir", file, "dir")
    for name in ("plain.bin", "pkg.bin", "pkg.zip", "pkgdir"):
        assert same(run(open_artifact(tmp_path / name)), expected), name
    assert same(run(open_artifact(tmp_path / "secret.bin", password="pw")), expected)
    with pytest.raises(ArtifactError, match="never encrypted"):
        open_artifact(tmp_path / "pkg.bin", password="pw")
    (tmp_path / "other.bin").write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(ArtifactError, match="not an rlx artifact"):
        open_artifact(tmp_path / "other.bin")
    with pytest.raises(ArtifactError, match="without rlx.json"):
        open_artifact(tmp_path)


def test_weight_only_package_keeps_the_table(baked, tmp_path):
    file = baked[(BakeProfile.EXACT, MemoryMode.DUPLEX)]
    write_rlxp(tmp_path / "w.rlxp", file, include_graph=False)
    package = read_rlxp_package(tmp_path / "w.rlxp", verify="full")
    assert package.manifest["graph_encoding"] == "none"
    assert "weight_only" in package.manifest["features"]
    assert len(package.file.graph) == 0
    for row in file.weights:
        got = package.file.weight(row.name)
        assert got.node_id is None and got.data.tobytes() == row.data.tobytes()


# -- hostile packages ----------------------------------------------------------------------
@pytest.fixture()
def flat(baked, tmp_path):
    write_rlxp(tmp_path / "m.rlxp", baked[(BakeProfile.EXACT, MemoryMode.COMPACT)])
    return tmp_path / "m.rlxp"


def rebuild(data: bytes, edit) -> bytes:
    """The flat package with its TOC edited (digest recomputed, data region kept)."""
    _, version, flags, toc, _, _, start = flat_parts(data)
    edit(toc)
    text = json.dumps(toc).encode()
    head = struct.pack("<8sIIQ", b"RLXPFLAT", version, flags, len(text)) + text \
        + xxhash.xxh3_128_digest(text)
    new_start = -(-len(head) // 64) * 64
    return head + bytes(new_start - len(head)) + data[start:]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t["manifest"].update(compat_version=3), "format version 3"),
    (lambda t: t["manifest"].update(graph_encoding="bincode_graph_v1"), "bincode"),
    (lambda t: t["tensors"][0].update(tier="lukewarm"), "tier 'lukewarm'"),
    (lambda t: t["tensors"][0].update(offset=t["tensors"][0]["offset"] + 1), "multiple of 64"),
    (lambda t: t["tensors"][1].update(offset=t["tensors"][0]["offset"]), "overlaps"),
    (lambda t: t["tensors"][0].update(raw_len=t["tensors"][0]["raw_len"] + 4), "raw_len"),
    (lambda t: t["tensors"][0].update(shape=[3, 3, 3]), "takes"),
    (lambda t: t["tensors"][0].update(offset=1 << 40), "past the tensor data"),
    (lambda t: t["graph"].update(length=t["graph"]["length"] + 64), "graph"),
    (lambda t: t["rlx"]["weights"][0].update(tensor=99), "out of range"),
    (lambda t: t["rlx"]["weights"].pop(0), "not used"),
    (lambda t: t["tensors"][0].update(layout="col_major"), "layout"),
    (lambda t: t.pop("rlx"), "no 'rlx'"),
])
def test_a_wrong_toc_field_is_refused_before_use(flat, edit, message):
    flat.write_bytes(rebuild(flat.read_bytes(), edit))
    with pytest.raises(ArtifactError, match=message):
        read_rlxp(flat)


def test_header_faults(flat):
    data = flat.read_bytes()
    cases = {
        b"RLXPFLAT": "too short",
        data[:8] + struct.pack("<I", 3) + data[12:]: "container version 3",
        data[:12] + struct.pack("<I", 1 | 2) + data[16:]: "bincode TOC",
        data[:12] + struct.pack("<I", 1 << 9 | 5) + data[16:]: "flags 0x205",
        data[:12] + struct.pack("<I", 4) + data[16:]: "flags 0x4",
        data[:16] + struct.pack("<Q", 1 << 40) + data[24:]: "TOC length",
        data[:30] + bytes([data[30] ^ 1]) + data[31:]: "TOC checksum",
    }
    for case, message in cases.items():
        flat.write_bytes(case)
        with pytest.raises(ArtifactError, match=message):
            read_rlxp(flat)


def test_a_flipped_tensor_byte_is_an_integrity_error(flat):
    data = bytearray(flat.read_bytes())
    *_, toc, _, _, start = flat_parts(bytes(data))
    row = toc["tensors"][0]
    data[start + row["offset"]] ^= 0x10
    flat.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=repr(row["name"])):
        read_rlxp(flat, verify="full")
    file = read_rlxp(flat)  # lazy: at first use
    with pytest.raises(IntegrityError):
        file.into_runtime_graph()
    read_rlxp(flat, verify="none")


def test_corrupt_compressed_tiers_are_refused_before_inflating(baked, tmp_path):
    path = tmp_path / "w.rlxp"
    for tier in ("warm", "cold"):
        write_rlxp(path, baked[(BakeProfile.EXACT, MemoryMode.COMPACT)], tier=tier)
        data = bytearray(path.read_bytes())
        *_, toc, _, _, start = flat_parts(bytes(data))
        data[start + toc["tensors"][0]["offset"] + 2] ^= 1
        path.write_bytes(bytes(data))
        with pytest.raises(IntegrityError):
            read_rlxp(path, verify="none")  # compressed tensors are always checked


def zip_with(members: dict[str, bytes], deflate: set[str] = frozenset(),
             aligned: bool = True) -> bytes:
    """An archive of `members`: STORE-d and aligned by rlx's writer, or by zipfile."""
    import io

    buffer = io.BytesIO()
    if aligned and not deflate:
        write_stored_zip(buffer, [(name, [data]) for name, data in members.items()])
        return buffer.getvalue()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data, zipfile.ZIP_DEFLATED if name in deflate
                             else zipfile.ZIP_STORED)
    return buffer.getvalue()


def test_zip_faults(baked, tmp_path):
    path = tmp_path / "m.rlxp.zip"
    write_rlxp(path, baked[(BakeProfile.EXACT, MemoryMode.COMPACT)])
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    cases = [
        (zip_with(members, {"weights/shards/000.pack.bin"}), "compressed"),
        (zip_with({**members, "../evil.json": b"{}"}), "safe relative path"),
        (zip_with({**members, "notes.txt": b"hi"}), "not a member"),
        (zip_with({k: v for k, v in members.items() if k != "graph/mir.bin"}), "names no member"),
        (zip_with({**members, "graph/mir.bin": members["graph/mir.bin"] + b" "}), "holds"),
        (zip_with(members, aligned=False), "aligned"),
        (path.read_bytes()[:200], "not a valid zip"),
    ]
    for data, message in cases:
        path.write_bytes(data)
        with pytest.raises(ArtifactError, match=message):
            read_rlxp(path)


def test_dir_faults(baked, tmp_path):
    folder = tmp_path / "pkg"
    write_rlxp(folder, baked[(BakeProfile.EXACT, MemoryMode.COMPACT)], "dir")
    (io_json,) = (folder / "graph").glob("io.*.json")  # named by its content's digest
    io_json.write_bytes(b'{"inputs": []}')
    with pytest.raises(ArtifactError, match="io"):
        read_rlxp(folder)
    (mir,) = (folder / "graph").glob("mir.*.bin")
    mir.unlink()
    with pytest.raises(ArtifactError, match=mir.name):
        read_rlxp(folder)


def test_subgraph_constants_round_trip(tmp_path):
    """Constants inside a Loop body whose ids exceed the top graph's node count (as in
    silero-vad): each is its own tensor, and the package runs like the .rlx."""
    from rlx.ir import BinaryOp, DType, Graph, Shape
    from rlx.ir.ops.control import Loop
    from rlx.ir.ops.logic import Compare, CompareOp

    body = Graph("body")
    i = body.input("i", Shape((), DType.I64))
    body.input("cond", Shape((), DType.BOOL))
    s = body.input("s", Shape((3,)))
    for k in range(12):  # more nodes than the top graph has
        s = body.binary(BinaryOp.ADD, s, body.constant(np.full(3, k, np.float32)))
    more = body.add_node(Compare(CompareOp.LT), [i, body.constant(np.int64(3))])
    body.set_outputs([more, s])
    g = Graph("loop")
    x = g.input("x", Shape((3,)))
    trips, go = g.constant(np.int64(5)), g.constant(np.bool_(True))
    g.set_outputs(g.unpack(g.add_node(Loop(body, n_carried=1), [trips, go, x])))
    file, _ = bake(g, {})
    write_rlx(tmp_path / "l.rlx", file)
    write_rlxp(tmp_path / "l.rlxp", file, tier="cold")
    assert same(run(read_rlxp(tmp_path / "l.rlxp", verify="full")),
                run(read_rlx(tmp_path / "l.rlx")))


@pytest.mark.parametrize("container", CONTAINERS)
def test_sidecars_and_placement_round_trip(baked, tmp_path, container):
    file = baked[(BakeProfile.EXACT, MemoryMode.DUPLEX)]
    placement = {"ranks": 2, "tensors": {w.name: i % 2 for i, w in enumerate(file.weights)}}
    path = tmp_path / CONTAINERS[container]
    write_rlxp(path, file, container, sidecars={"tokenizer": {"vocab": ["a", "b"]}},
               placement=placement, sidecar_tier="warm")
    package = read_rlxp_package(path, verify="full")
    assert package.placement == placement
    assert package.sidecars["tokenizer"] == {"vocab": ["a", "b"]}
    assert {"dist_placement", "sidecar_tokenizer", "sidecar_io"} <= set(
        package.manifest["features"])
    if container == "zip":
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        assert {"dist/placement.json", "sidecars/tokenizer.json.zst",
                "graph/io.json.zst"} <= set(names)
    with pytest.raises(ArtifactError, match="reserved"):
        write_rlxp(tmp_path / "x.rlxp", file, sidecars={"io": {}})


@pytest.mark.parametrize("engine", ["numpy", "onnxruntime", "openvino"])
@pytest.mark.parametrize("container", CONTAINERS)
def test_rlx_load_runs_every_container_on_every_engine(baked, tmp_path, container, engine):
    """`rlx.load` opens packages as it opens `.rlx` files (issue 16): the same outputs as
    the numpy engine on the `.rlx` of the same bake."""
    import rlx

    file = baked[(BakeProfile.SIZE, MemoryMode.COMPACT)]
    write_rlx(tmp_path / "m.rlx", file)
    out = tmp_path / f"m-{CONTAINERS[container]}"
    write_rlxp(out, file, container)
    compiled = Session().compile(read_rlx(tmp_path / "m.rlx").into_runtime_graph())
    feeds = feeds_for(compiled.input_shapes)
    expected = compiled.run(feeds)
    model = rlx.load(out, engine=engine)
    got = model.run(feeds)
    assert model.engine == engine and len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
