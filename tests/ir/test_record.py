"""`rlx.record.dataclass` behaves as `dataclasses.dataclass` (frozen or not, with or without
eq, with or without slots): the same class built both ways gives equal fields, repr,
equality, hashes, `replace`, frozen errors, defaults and `__post_init__`; the standard
decorator accepts it as a base."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
import tracemalloc
from typing import ClassVar

import pytest

from rlx.record import dataclass


def _pair(eq: bool = True, frozen: bool = True, slots: bool = False):
    """The same class built with the standard decorator and with ours."""

    def body():
        class Base:
            arity: ClassVar[tuple[int, int]] = (1, 1)
            a: int
            b: float | None = None
            c: tuple[int, ...] = ()
            d: list = dataclasses.field(default_factory=list, compare=False)
            hidden: str = dataclasses.field(default="h", repr=False)
            seen: ClassVar[list] = []

            def __post_init__(self):
                type(self).seen.append(self.a)

        return Base

    std = dataclasses.dataclass(frozen=frozen, eq=eq, slots=slots)(body())
    ours = dataclass(frozen=frozen, eq=eq, slots=slots)(body())
    return std, ours


@pytest.mark.parametrize("slots", [False, True])
def test_fields_repr_eq_hash_and_replace_match_the_standard_decorator(slots):
    std, ours = _pair(slots=slots)
    args = [(1,), (2, 0.5), (3, None, (1, 2))]
    for a in args:
        s, o = std(*a), ours(*a)
        assert repr(s) == repr(o)
        assert hash(s) == hash(o)
        assert [(f.name, f.default, f.repr, f.compare) for f in dataclasses.fields(s)] == \
               [(f.name, f.default, f.repr, f.compare) for f in dataclasses.fields(o)]
        assert dataclasses.replace(o, b=9.0) == ours(a[0], 9.0, *a[2:])
        assert dataclasses.asdict(o) == dataclasses.asdict(s)
    assert ours(1) == ours(1, d=[5])  # d does not compare
    assert ours(1) != ours(2) and ours(1) != std(1)  # other class: not equal
    assert ours(a=4, c=(1,)).c == (1,) and ours(4).d == [] and ours(4).d is not ours(4).d
    assert std.seen[:3] == [1, 2, 3] and ours.seen[:4] == [1, 1, 1, 2]  # __post_init__ ran
    assert dataclasses.is_dataclass(ours(1)) and ours.__match_args__ == std.__match_args__


@pytest.mark.parametrize("slots", [False, True])
def test_instances_are_frozen(slots):
    _, ours = _pair(slots=slots)
    o = ours(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del o.a
    with pytest.raises(TypeError):
        ours()  # a is required


def test_mutable_records_assign_and_are_unhashable_as_the_standard_ones():
    std, ours = _pair(frozen=False)
    s, o = std(1, 0.5), ours(1, 0.5)
    s.a, o.a = 3, 3
    assert repr(s) == repr(o) and o == ours(3, 0.5) and o != ours(1, 0.5)
    assert std.__hash__ is None and ours.__hash__ is None
    assert dataclasses.replace(o, b=2.0) == ours(3, 2.0)
    assert dataclasses.fields(std)[0].name == dataclasses.fields(ours)[0].name == "a"
    del o.b  # not frozen: the instance attribute goes, the class default shows through
    assert o.b is None
    mutable_std, mutable_ours = _pair(eq=False, frozen=False)
    assert mutable_ours(1) != mutable_ours(1) and type(mutable_ours(1)).__hash__ is \
        object.__hash__ is type(mutable_std(1)).__hash__


def test_eq_false_keeps_identity_semantics():
    std, ours = _pair(eq=False)
    o = ours(1)
    assert o != ours(1) and o == o and (o == ours(1)) == (std(1) == std(1))
    assert type(o).__eq__ is object.__eq__ and type(std(1)).__eq__ is object.__eq__


def test_standard_dataclasses_can_extend_a_record():
    _, ours = _pair()

    @dataclasses.dataclass(frozen=True)
    class Child(ours):
        e: int = 7

    c = Child(1)
    assert c.e == 7 and [f.name for f in dataclasses.fields(c)] == ["a", "b", "c", "d",
                                                                    "hidden", "e"]


def test_ops_built_as_records_still_compare_and_serialise():
    from rlx.ir.ops.elementwise import Activation, Unary

    assert Unary(Activation.RELU) == Unary(Activation.RELU)
    assert len({Unary(Activation.RELU), Unary(Activation.RELU), Unary(Activation.TANH)}) == 2
    assert repr(Unary(Activation.TANH)) == \
        "Unary(kind=<Activation.TANH: 'tanh'>, alpha=None, beta=None)"
    assert Unary(Activation.RELU, alpha=0.1) != Unary(Activation.RELU)


def test_init_binds_the_same_before_and_after_it_is_compiled():
    """The first `COMPILE_AFTER` instances are bound by hand, the rest by a compiled
    `__init__`: both give what the standard decorator gives, and refuse what it refuses."""
    from rlx import record

    std, ours = _pair()
    calls = [((1,), {}), ((2,), {"c": (1,), "hidden": "x"}), ((), {"a": 3, "b": 0.5}),
             ((4, 1.0, (2,), [9]), {})]
    bad = [((), {}), ((1,), {"a": 2}), ((1,), {"zz": 0}), ((1, 2, 3, 4, 5, 6), {})]
    for _ in range(2 * record.COMPILE_AFTER // len(calls) + 1):
        for args, kwargs in calls:
            s, o = std(*args, **kwargs), ours(*args, **kwargs)
            assert repr(s) == repr(o) and s.d == o.d
        assert ours(1).d is not ours(1).d  # a fresh default from the factory each time
        std(1), std(1)
        for args, kwargs in bad:
            with pytest.raises(TypeError) as theirs:
                std(*args, **kwargs)
            with pytest.raises(TypeError) as mine:
                ours(*args, **kwargs)
            for phrase in ("missing", "multiple values", "unexpected keyword", "positional"):
                assert (phrase in str(theirs.value)) == (phrase in str(mine.value))
    assert ours.__init__ is not record._first_init  # compiled by now
    assert std.seen == ours.seen  # __post_init__ ran on each instance, in both phases


@pytest.mark.parametrize("frozen", [False, True])
def test_slotted_records_hold_no_dict_and_copy_as_the_standard_ones(frozen):
    std, ours = _pair(frozen=frozen, slots=True)
    s, o = std(1, 0.5, (2,), [3]), ours(1, 0.5, (2,), [3])
    assert ours.__slots__ == std.__slots__ and not hasattr(o, "__dict__")
    with pytest.raises(AttributeError):
        o.undeclared = 1
    for clone in (copy.copy, copy.deepcopy):
        assert repr(clone(o)) == repr(clone(s)) and clone(o) == o
    assert _bytes_each(ours) + 32 <= _bytes_each(_pair(frozen=frozen)[1])


def _bytes_each(cls: type) -> float:
    """The heap bytes an instance of `cls` takes (its object and any dict or values)."""
    [cls(1) for _ in range(64)]  # past the hand-bound instances: the compiled __init__
    tracemalloc.start()
    try:
        held = [cls(k) for k in range(1000)]
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (size - sys.getsizeof(held)) / len(held)


def test_slotted_records_call_super_and_extend_slotted_bases():
    """Making the class again keeps what refers to it: `super()` in its methods, a base's
    `__init_subclass__` (the op registry), a slotted subclass adding its own fields."""

    @dataclass(frozen=True, slots=True)
    class Base:
        made: ClassVar[list] = []

        def __init_subclass__(cls, **kwargs):
            super().__init_subclass__(**kwargs)
            Base.made.append(cls)

        def describe(self) -> str:
            return "base"

    @dataclass(frozen=True, slots=True)
    class Leaf(Base):
        a: int
        b: str = "b"

        def describe(self) -> str:
            return f"leaf of {super().describe()}"

    leaf = Leaf(1)
    assert leaf.describe() == "leaf of base" and Base.made[-1] is Leaf
    assert Leaf.__slots__ == ("a", "b") and Base.__slots__ == () and leaf == Leaf(1, "b")
    assert not hasattr(leaf, "__dict__") and dataclasses.fields(leaf)[1].default == "b"


def test_the_loaded_graph_records_have_slots_and_pickle():
    """What a model holds by the hundred is slotted, and still pickles (frozen slotted
    records restore through `__setstate__`, as the standard decorator's do)."""
    import numpy as np

    from rlx.artifact.weight_row import RlxWeight
    from rlx.ir import DType, Graph, Shape
    from rlx.ir.ops.elementwise import BinaryOp

    g = Graph("g")
    x = g.input("x", Shape((2, 3), DType.F32))
    y = g.binary(BinaryOp.ADD, x, g.constant(np.ones((2, 3), np.float32), name="c"))
    row = RlxWeight("c", (2, 3), "f32", "f32", np.ones(6, np.float32), node_id=1)
    for record in (*g.nodes(), g.node(1).op, g.node(y).shape, row):
        assert not hasattr(record, "__dict__"), type(record)
    for record in (*g.nodes(), g.node(1).op, row):
        restored = pickle.loads(pickle.dumps(record))
        assert repr(restored) == repr(record) and type(restored) is type(record)
    assert pickle.loads(pickle.dumps(g.node(y))) == g.node(y)
