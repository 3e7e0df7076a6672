"""Profiles, aliases and the options they expand to (the reference's table, inventory 3.2)."""

from __future__ import annotations

import pytest

from rlx import BakeOptions, BakeProfile, MemoryMode
from rlx.errors import BakeError


@pytest.mark.parametrize("text, profile", [
    ("merge", BakeProfile.MERGE), ("RAW", BakeProfile.MERGE), ("fold", BakeProfile.FOLD),
    (" lossless ", BakeProfile.EXACT), ("size", BakeProfile.SIZE),
])
def test_parse_names_and_aliases_quietly(text, profile, caplog):
    assert BakeProfile.parse(text) is profile
    assert not caplog.records


@pytest.mark.parametrize("old, profile", [
    ("none", BakeProfile.MERGE), ("cleanup", BakeProfile.FOLD), ("default", BakeProfile.EXACT),
    ("compute", BakeProfile.EXACT), ("Compact", BakeProfile.SIZE), ("quant", BakeProfile.SIZE),
])
def test_old_names_still_parse_and_warn_with_the_new_name(old, profile, caplog):
    assert BakeProfile.parse(old) is profile
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert record.getMessage() == (f"bake profile {old.lower()!r} is an old name: "
                                   f"use {profile.value!r}")


def test_unknown_profile_lists_the_accepted_names():
    with pytest.raises(BakeError, match="unknown bake profile 'bogus'; expected one of "
                                        "merge, fold, exact, size, fast, raw, lossless"):
        BakeProfile.parse("bogus")


def test_no_profile_name_is_a_memory_mode_name():
    names = BakeProfile.all_names()
    assert names[:5] == ["merge", "fold", "exact", "size", "fast"]
    assert not [n for n in names if _is_memory_mode(n)]


def _is_memory_mode(name: str) -> bool:
    try:
        MemoryMode.parse(name)
    except BakeError:
        return False
    return True


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


def test_fast_is_exact_plus_a_precision_plan():
    fast = BakeOptions.from_profile("fast")
    assert fast.precision_plan and not fast.quant
    assert fast.replace(precision_plan=False, profile=BakeProfile.EXACT) == BakeOptions()


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
