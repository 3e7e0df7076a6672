"""write_rlx streams the blobs: deferred weights (rlx.deferred) are read or computed one at a
time as they are written, and the file is byte for byte the one of the in-memory path."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from rlx import BakeOptions, BakeProfile, RlxFile, bake_bundle, load_weights
from rlx.artifact import read_rlx, write_rlx
from rlx.artifact.layout import checksum
from rlx.artifact.writer import encode_rlx, iter_rlx_bytes
from rlx.deferred import Computed, Deferred, FileView, byte_view, materialize
from rlx.ir import Constant
from tests.baking.models import matmul_graph
from tests.hardening import seeds

K, N = 1024, 2048  # 8 MiB of f32, 2.1 MiB as Q8_0: deferred either way


def baked(tmp_path, profile: BakeProfile) -> RlxFile:
    w = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32)
    save_file({"w": w}, str(tmp_path / "w.safetensors"))
    bundle = load_weights(tmp_path / "w.safetensors")
    return bake_bundle(matmul_graph(K, N), bundle, BakeOptions.from_profile(profile))[0]


def in_memory(file: RlxFile) -> RlxFile:
    """The same file with every deferred payload read into memory."""
    graph = file.graph.replace_ops({n.id: Constant(materialize(n.op.data))
                                    for n in file.graph.nodes()
                                    if isinstance(n.op, Constant)
                                    and isinstance(n.op.data, Deferred)})
    rows = [w.replace(data=byte_view(materialize(w.data))) for w in file.weights]
    return RlxFile(file.meta, graph, rows)


@pytest.mark.parametrize("profile, kind", [(BakeProfile.EXACT, FileView),
                                           (BakeProfile.SIZE, Computed)])
def test_streamed_bytes_and_checksums_are_the_in_memory_ones(tmp_path, profile, kind):
    file = baked(tmp_path, profile)
    assert [type(w.data) for w in file.weights] == [kind]  # read from the file / encoded
    write_rlx(tmp_path / "streamed.rlx", file)
    write_rlx(tmp_path / "memory.rlx", in_memory(file))
    streamed = (tmp_path / "streamed.rlx").read_bytes()
    assert streamed == (tmp_path / "memory.rlx").read_bytes()
    assert streamed == b"".join(bytes(p) for p in iter_rlx_bytes(file))
    _, header, blobs = encode_rlx(in_memory(file))
    assert header in streamed  # the header holds the checksums of the blobs as they are
    loaded = read_rlx(tmp_path / "streamed.rlx", verify="full")  # every checksum checked
    assert [checksum(w.data) for w in loaded.weights] == [checksum(b) for b in blobs]


def _disk_failure(count: int) -> np.ndarray:
    raise OSError(5, "Input/output error")


def test_a_blob_that_fails_half_way_leaves_the_old_file_and_no_temp(tmp_path):
    file = baked(tmp_path, BakeProfile.SIZE)
    path = tmp_path / "m.rlx"
    write_rlx(path, file)
    before = path.read_bytes()
    (row,) = file.weights
    broken = Computed(_disk_failure, (), (row.nbytes,), (row.nbytes,), np.uint8)
    file.weights = [row.replace(data=broken)]
    with pytest.raises(OSError, match="Input/output error"):
        write_rlx(path, file)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.rlx", "w.safetensors"]
    with pytest.raises(OSError, match="Input/output error"):
        write_rlx(tmp_path / "new.rlx", file)
    assert not (tmp_path / "new.rlx").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.rlx", "w.safetensors"]


def test_an_encrypted_file_of_deferred_weights_reads_back(tmp_path):
    file = baked(tmp_path, BakeProfile.SIZE)
    write_rlx(tmp_path / "secret.rlx", file, password="pw", kdf=seeds.FAST_KDF)
    write_rlx(tmp_path / "plain.rlx", file)
    opened = read_rlx(tmp_path / "secret.rlx", password="pw", verify="full")
    plain = read_rlx(tmp_path / "plain.rlx", verify="full")
    assert [w.data.tobytes() for w in opened.weights] == [w.data.tobytes() for w in plain.weights]
