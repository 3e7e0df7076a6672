"""Hostile and damaged files: every failure is an ArtifactError naming what is wrong."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rlx import BakeOptions, BakeProfile, MemoryMode, bake
from rlx.artifact import parse_rlx, write_rlx
from rlx.artifact.layout import MAGIC, PREAMBLE, align, header_digest
from rlx.artifact.writer import iter_rlx_bytes
from rlx.errors import ArtifactError, EncryptedFileError, IntegrityError
from tests.baking.models import mul_graph
from tests.hardening.mutate import split_rlx


def small_file_bytes(memory=MemoryMode.DUPLEX) -> bytes:
    file, _ = bake(mul_graph(), {"w": np.arange(4, dtype=np.float32)},
                   BakeOptions.from_profile(BakeProfile.EXACT).replace(memory=memory))
    return b"".join(bytes(p) for p in iter_rlx_bytes(file))


GOOD = small_file_bytes()


def open_and_use(data: bytes) -> None:
    """Open, then use both layouts: the graph's bytes (a compile) and the table's (a
    duplex file's other copy, checked only when it is used)."""
    file = parse_rlx(data, verify="lazy")
    file.into_runtime_graph()
    for row in file.weights:
        file.tensor(row.name)


def split(data: bytes) -> tuple[dict, bytes]:
    """The header as a dict and the data section (blob offsets are relative to it)."""
    return split_rlx(data)


def rebuild(header: dict, data: bytes, *, schema: int = 3, flags: int = 0) -> bytes:
    """A file with an edited header, plain, and a correct header checksum, to reach deeper
    checks."""
    text = json.dumps(header).encode()
    preamble = PREAMBLE.pack(MAGIC, schema, flags, len(text), header_digest(text))
    pad = bytes(align(PREAMBLE.size + len(text)) - PREAMBLE.size - len(text))
    return preamble + text + pad + data


def test_the_untouched_file_opens():
    open_and_use(GOOD)
    header, data = split(GOOD)
    open_and_use(rebuild(header, data))


def test_truncation_at_every_offset_is_an_artifact_error():
    for cut in range(len(GOOD)):
        with pytest.raises(ArtifactError):
            open_and_use(GOOD[:cut])


def test_every_bit_flip_of_the_header_is_detected():
    length = PREAMBLE.size + PREAMBLE.unpack_from(GOOD)[3]
    for bit in range(length * 8):
        data = bytearray(GOOD)
        data[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(ArtifactError):
            open_and_use(bytes(data))


def test_every_bit_flip_of_the_data_is_detected_at_first_use():
    header, _ = split(GOOD)
    start = len(GOOD) - sum(b["length"] for b in header["blobs"]) - 64 * 2
    for bit in range(start * 8, len(GOOD) * 8):
        data = bytearray(GOOD)
        data[bit // 8] ^= 1 << (bit % 8)
        try:
            open_and_use(bytes(data))
        except ArtifactError:
            continue
        # a flip in zero padding between blobs changes nothing anyone reads
        assert data[bit // 8] in (1 << (bit % 8),)


def _edit(mutate) -> bytes:
    header, data = split(GOOD)
    mutate(header)
    return rebuild(header, data)


@pytest.mark.parametrize("mutate, message", [
    (lambda h: h["blobs"][1].update(offset=h["blobs"][0]["offset"]), "overlaps"),
    (lambda h: h["blobs"][0].update(offset=8), "not a multiple of 64"),
    (lambda h: h["blobs"][1].update(offset=1 << 40), "past the end of the file"),
    (lambda h: h["blobs"][0].update(length=12), "holds 12 bytes, 16 expected"),
    (lambda h: h["blobs"][0].update(length=-1), "non-negative"),
    (lambda h: h["weights"][0].update(shape=[2 ** 40, 2 ** 40]), "expected"),
    (lambda h: h["weights"][0].update(encoding="gguf_q9_0"), "unknown weight encoding"),
    (lambda h: h["weights"][0].update(node_id=0), "is not a constant of the graph"),
    (lambda h: h["weights"][0].update(blob=0), "already used"),
    (lambda h: h["weights"][0].update(blob=7), "out of range"),
    (lambda h: h["graph"]["nodes"][0].update(op="Rm -rf"), "unknown op"),
    (lambda h: h["graph"]["nodes"][2].update(inputs=[2, 2]), "earlier node"),
    (lambda h: h["graph"]["nodes"][1]["shape"].update(dims=[2 ** 62, 2 ** 62]), "expected"),
    (lambda h: h["graph"].update(nodes="many"), "must be a list"),
    (lambda h: h["meta"].update(nodes="3"), "meta.nodes"),
    (lambda h: h.update(format="onnx"), "does not describe"),
    (lambda h: h["blobs"].append({"offset": 4096, "length": 0, "xxh3": "0"}), "past the end"),
])
def test_structural_lies_are_refused(mutate, message):
    with pytest.raises(ArtifactError, match=message):
        open_and_use(_edit(mutate))


def test_deep_nesting_is_refused():
    header, data = split(GOOD)
    nest: dict = {}
    for _ in range(200):
        nest = {"x": nest}
    header["meta"]["deep"] = nest
    with pytest.raises(ArtifactError, match="nests deeper"):
        open_and_use(rebuild(header, data))


@pytest.mark.parametrize("schema, message", [
    (1, "Rust reference's bincode format"), (2, "Rust reference's bincode format"),
    (4, "schema version 4 is not supported"),
])
def test_other_schemas_are_refused_clearly(schema, message):
    header, data = split(GOOD)
    with pytest.raises(ArtifactError, match=message):
        open_and_use(rebuild(header, data, schema=schema))


def test_absurd_header_length_is_refused_before_reading():
    data = bytearray(GOOD)
    PREAMBLE.pack_into(data, 0, MAGIC, 3, 0, 1 << 62, bytes(16))
    with pytest.raises(ArtifactError, match="header length"):
        open_and_use(bytes(data))


def test_unknown_flags_and_bad_magic():
    header, data = split(GOOD)
    with pytest.raises(ArtifactError, match="unknown flags"):
        open_and_use(rebuild(header, data, flags=2))
    with pytest.raises(ArtifactError, match="bad magic"):
        open_and_use(b"PK\x03\x04" + GOOD[4:])


def test_a_corrupt_header_is_an_integrity_error():
    data = bytearray(GOOD)
    data[PREAMBLE.size + 3] ^= 1
    with pytest.raises(IntegrityError, match="header checksum"):
        open_and_use(bytes(data))


def test_encrypted_bytes_need_a_password():
    with pytest.raises(EncryptedFileError, match="encrypted"):
        parse_rlx(b"RLXENC01" + bytes(100))


WRITER = textwrap.dedent("""
    import sys, numpy as np
    from rlx.artifact import write_rlx
    from rlx import bake
    from tests.baking.models import mul_graph
    n = 1 << 22  # 16 MiB of weights: the write takes long enough to be interrupted
    g = mul_graph(n)
    file, _ = bake(g, {"w": np.ones(n, np.float32)})
    print("ready", flush=True)
    sys.stdin.readline()
    while True:
        write_rlx(sys.argv[1], file)
""")


def test_a_writer_killed_mid_write_leaves_the_previous_file(tmp_path):
    path = tmp_path / "m.rlx"
    write_rlx(path, parse_rlx(GOOD))
    before = path.read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=str(__import__("pathlib").Path(
                                __file__).resolve().parents[2]))
    assert proc.stdout.readline().strip() == b"ready"
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    after = path.read_bytes()
    assert after == before or parse_rlx(after, verify="full").meta.name == "mul_bake"
    # the killed writer's temp file is cleaned by the next write to the folder
    write_rlx(path, parse_rlx(GOOD))
    assert [p.name for p in tmp_path.iterdir()] == ["m.rlx"]
