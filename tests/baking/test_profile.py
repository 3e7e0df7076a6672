"""Profiles, aliases and the options they expand to (the reference's table, inventory 3.2)."""

from __future__ import annotations

import pytest

from rlx import BakeOptions, BakeProfile, MemoryMode
from rlx.errors import BakeError


@pytest.mark.parametrize("text, profile", [
    ("merge", BakeProfile.MERGE), ("none", BakeProfile.MERGE), ("RAW", BakeProfile.MERGE),
    ("cleanup", BakeProfile.FOLD), (" lossless ", BakeProfile.EXACT),
    ("default", BakeProfile.EXACT), ("compute", BakeProfile.EXACT),
    ("compact", BakeProfile.SIZE), ("quant", BakeProfile.SIZE), ("size", BakeProfile.SIZE),
])
def test_parse_aliases(text, profile):
    assert BakeProfile.parse(text) is profile


def test_unknown_profile_lists_the_accepted_names():
    with pytest.raises(BakeError, match="unknown bake profile 'bogus'; expected one of "
                                        "merge, fold, exact, size, none, raw, cleanup"):
        BakeProfile.parse("bogus")


def test_all_names_lists_canonical_names_then_aliases():
    names = BakeProfile.all_names()
    assert names[:4] == ["merge", "fold", "exact", "size"]
    assert set(names[4:]) == {"none", "raw", "cleanup", "lossless", "default", "compute",
                              "compact", "quant"}


def test_size_enables_quant():
    size = BakeOptions.from_profile(BakeProfile.SIZE)
    assert size.quant and size.ternary and size.skip_zero and size.memory is MemoryMode.COMPACT
    exact = BakeOptions.from_profile(BakeProfile.EXACT)
    assert exact.ternary and exact.skip_zero and not exact.quant
    assert exact.dedupe_constants and not exact.keep_folded_bindings
    merge = BakeOptions.from_profile(BakeProfile.MERGE)
    assert not (merge.skip_zero or merge.ternary or merge.quant or merge.constant_folding)
    assert merge.memory is MemoryMode.DUPLEX and merge.keep_folded_bindings
    fold = BakeOptions.from_profile(BakeProfile.FOLD)
    assert fold.constant_folding and fold.dce and not fold.skip_zero and not fold.ternary


def test_default_options_are_the_exact_profile():
    assert BakeOptions() == BakeOptions.from_profile(BakeProfile.EXACT)
    assert BakeProfile.EXACT.options() == BakeOptions()


def test_every_profile_has_a_description():
    assert all(p.description for p in BakeProfile)


def test_replace_refuses_unknown_options():
    assert BakeOptions().replace(quant=True).quant
    with pytest.raises(BakeError, match="unknown bake option"):
        BakeOptions().replace(quantise=True)


@pytest.mark.parametrize("text, mode", [
    ("duplex", MemoryMode.DUPLEX), ("both", MemoryMode.DUPLEX), ("full", MemoryMode.DUPLEX),
    ("runtime", MemoryMode.RUNTIME), ("graph", MemoryMode.RUNTIME),
    ("compact", MemoryMode.COMPACT), ("Table", MemoryMode.COMPACT), ("lean", MemoryMode.COMPACT),
])
def test_memory_mode_aliases(text, mode):
    assert MemoryMode.parse(text) is mode


def test_unknown_memory_mode_message_is_the_references():
    with pytest.raises(BakeError) as err:
        MemoryMode.parse("Disk")
    assert str(err.value) == "unknown memory mode 'disk'; expected duplex, runtime, or compact"
