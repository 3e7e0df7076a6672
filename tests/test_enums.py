"""rlx.enums: the one way enums are parsed from text, and the enums that use it."""

from __future__ import annotations

import enum

import pytest

from rlx.artifact import MemoryMode
from rlx.baking import BakeProfile
from rlx.codecs import Encoding
from rlx.enums import lookup, parse_enum
from rlx.errors import BakeError, GraphError, WeightError
from rlx.ir import Activation, DType
from rlx.weights import WeightLoadPolicy


class Color(enum.Enum):
    RED = "red"
    DARK_BLUE = "dark-blue"


ALIASES = {Color.RED: ("crimson",)}


@pytest.mark.parametrize("text, member", [
    ("red", Color.RED), (" Red ", Color.RED), ("CRIMSON", Color.RED),
    ("dark-blue", Color.DARK_BLUE), ("DARK_BLUE", None), ("blue", None),
])
def test_lookup_trims_folds_case_and_knows_aliases(text, member):
    assert lookup(Color, text, ALIASES) is member


def test_exact_lookup_and_member_names():
    assert lookup(Color, "Red", exact=True) is None
    assert lookup(Color, "DARK_BLUE", exact=True, names=True) is Color.DARK_BLUE
    assert lookup(Color, "dark-blue", exact=True, names=True) is Color.DARK_BLUE


def test_parse_enum_raises_the_error_it_is_given_with_the_text():
    with pytest.raises(KeyError, match="'green'"):
        parse_enum(Color, "green", lambda t: KeyError(t))


@pytest.mark.parametrize("parse, text, member", [
    (BakeProfile.parse, " LOSSLESS", BakeProfile.EXACT),
    (MemoryMode.parse, "lean", MemoryMode.COMPACT),
    (WeightLoadPolicy.parse, "Keep-Packed", WeightLoadPolicy.KEEP_PACKED),
    (WeightLoadPolicy.parse, "f32", WeightLoadPolicy.F32_FIRST),
    (DType.parse, " F16", DType.F16),
    (Encoding.parse, "gguf_q8_0", Encoding.GGUF_Q8_0),
])
def test_each_parse_goes_through_the_helper(parse, text, member):
    assert parse(text) is member


@pytest.mark.parametrize("parse, error", [
    (BakeProfile.parse, BakeError), (MemoryMode.parse, BakeError),
    (WeightLoadPolicy.parse, WeightError), (DType.parse, GraphError),
    (Encoding.parse, BakeError),
])
def test_each_parse_raises_its_own_error(parse, error):
    with pytest.raises(error, match="unknown"):
        parse("nonsense")


def test_graph_json_enums_match_values_and_names_exactly():
    from rlx.ir.serialize import enum_text

    assert all(lookup(Activation, enum_text(a), exact=True) is a for a in Activation)
    assert lookup(Activation, "RELU", exact=True, names=True) is Activation.RELU
