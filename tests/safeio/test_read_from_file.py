"""`read_from_file`: a leased map's bytes read with pread, not through the map."""

from __future__ import annotations

import numpy as np

from rlx.errors import WeightError
from rlx.safeio import in_leased_map, map_file, read_from_file


def test_reads_what_the_map_shows_and_only_inside_a_held_lease(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 3 * 4096 + 17, np.uint8)
    path = tmp_path / "blob.bin"
    path.write_bytes(data.tobytes())
    mapped = map_file(path, WeightError)
    assert mapped.leased
    view = np.frombuffer(mapped.buffer, np.uint8)
    base = view.ctypes.data
    out = np.empty(5000, np.uint8)
    assert in_leased_map(base + 100, out.size)
    assert read_from_file(base + 100, out.data)
    np.testing.assert_array_equal(out, data[100:5100])
    assert not in_leased_map(base + data.size - 10, 11)  # runs past the map
    assert not read_from_file(base + data.size - 10, out[:11].data)
    memory = np.zeros(64, np.uint8)
    assert not in_leased_map(memory.ctypes.data, 64)  # not a map at all
    assert not read_from_file(memory.ctypes.data, out[:64].data)
    mapped.lease.release()  # let go: its bytes are no longer vouched for
    assert not read_from_file(base + 100, out.data)


def test_a_lease_released_while_the_leases_are_looked_through(tmp_path, monkeypatch):
    """The collector may run a map's finalizer (which releases its lease, under the same
    reentrant lock) in the thread that is looking through the leases: the lookup goes on,
    where iterating the set itself raised 'Set changed size during iteration'."""
    from rlx.safeio import mapping

    class Collected:
        """A lease whose map the collector finalises as the lookup reads it."""

        address = length = 0

        @property
        def fd(self) -> int:
            mapping._leases.discard(self)
            return -1

    monkeypatch.setattr(mapping, "_leases", {Collected(), Collected()})
    assert not in_leased_map(1 << 20, 16)
