"""`dataclasses.dataclass` without its class-creation cost, for classes on the load path.

The standard decorator compiles six methods per class with `exec` (init, repr, eq, hash,
setattr, delattr) and builds a signature for the docstring: ~70 op classes made that about
half of `import rlx.runtime`, and the artifact, codec and safe-reading records another 20 ms
of a small model's load. Here a class gets shared generic methods (repr, eq, hash and, when
frozen, the setattr/delattr that refuse). Its `__init__` binds arguments by hand for
the first `COMPILE_AFTER` instances and is then compiled (`exec`, ~50-150 us a class):
reading a model builds a few instances each of ~30 classes, a bake thousands of a few.
The result is a real dataclass to the standard library: `dataclasses.fields`, `replace`,
`asdict` and `is_dataclass` work, and instances compare, hash and print exactly as the
standard decorator's would. Its standard `Field`s are made when first asked for: the load
path uses this module's `field`, `fields` and `replace`, and so never imports dataclasses.

`frozen`, `eq` and `slots` take the fast path; any other option falls back to the standard
decorator. `slots=True` is for records a model holds by the hundred (nodes, shapes,
constants, weight rows): an instance then has no `__dict__`, 40-48 bytes less each, for
~70 us more at import (the class is made twice): not for classes of a few instances.

Why: a cold `rlx.load` is dominated by imports, and class creation was most of them. When:
for classes defined on the load path (ops, artifact and codec records) or built by the
thousand; classes that are neither can use `dataclasses.dataclass` as it is.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

__all__ = ["COMPILE_AFTER", "dataclass", "field", "fields", "replace"]

COMPILE_AFTER = 32  # instances a class builds by binding by hand before its __init__ is compiled
_built: dict[type, tuple[int, tuple]] = {}
"""Per class binding by hand: the instances it has built and its `__init__`'s parameters
(name, default, factory), made at its first instance and dropped when it is compiled: a
class never instantiated (most op classes of a load) holds none."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()  # no default (dataclasses.MISSING, without importing dataclasses)


class Field:
    """What a record keeps of a field: the standard `dataclasses.Field`'s options that
    records take. A standard `Field` given in a class body is kept too (`standard`), and is
    what `dataclasses.fields` then returns for it."""

    __slots__ = ("name", "type", "default", "default_factory", "init", "repr", "compare",
                 "standard")

    def __init__(self, default: Any = _MISSING, default_factory: Any = _MISSING,
                 init: bool = True, repr: bool = True, compare: bool = True,
                 standard: Any = None) -> None:
        self.name: str = ""
        self.type: Any = None
        self.default, self.default_factory = default, default_factory
        self.init, self.repr, self.compare, self.standard = init, repr, compare, standard


def _field(*, default: Any = _MISSING, default_factory: Any = _MISSING, init: bool = True,
           repr: bool = True, compare: bool = True) -> Any:
    """Drop-in for `dataclasses.field` in a record's body (those options only)."""
    return Field(default, default_factory, init, repr, compare)


def fields(record: Any) -> tuple[Any, ...]:
    """A record's (or a record type's) fields, as `dataclasses.fields` without importing
    dataclasses: the load path reads ops and artifact records through this. Any other
    dataclass (a standard subclass of a record too) gets the standard answer."""
    own = _own_fields(record if isinstance(record, type) else type(record))
    if own is None:
        import dataclasses

        return dataclasses.fields(record)
    return tuple(own.values())


def replace(record: Any, /, **changes: Any) -> Any:
    """`record` with `changes`, as `dataclasses.replace` (its `__post_init__` runs again)."""
    own = _own_fields(type(record))
    if own is None:
        import dataclasses

        return dataclasses.replace(record, **changes)
    for f in own.values():
        if f.init and f.name not in changes:
            changes[f.name] = getattr(record, f.name)
    return type(record)(**changes)


def _own_fields(cls: type) -> dict[str, Field] | None:
    """The fields of a class this module made (not of a standard subclass of one)."""
    return cls.__dict__.get("_record_fields")


def _dataclass(cls: type | None = None, /, *, frozen: bool = False, eq: bool = True,
               slots: bool = False, **options: Any) -> Any:
    """Drop-in for `dataclasses.dataclass`; `frozen`, `eq` and `slots` take the fast path,
    any other option the standard decorator."""
    if options:
        import dataclasses

        make = dataclasses.dataclass(frozen=frozen, eq=eq, slots=slots, **options)
        return make if cls is None else make(cls)

    def wrap(c: type) -> type:
        record = _record(c, frozen, eq)
        return _with_slots(record, frozen) if slots else record

    return wrap if cls is None else wrap(cls)


if TYPE_CHECKING:  # type checkers know what the standard decorator makes; ours is the same
    from dataclasses import dataclass, field
else:
    dataclass, field = _dataclass, _field


class _Standard:
    """`__dataclass_fields__` or `__dataclass_params__` of a record, made with dataclasses
    when first asked for (by `dataclasses.fields`, `replace`, `asdict`, a standard subclass),
    then stored on the class asked in its place: a load never asks, and never imports
    dataclasses (~0.15 MiB of code and classes). One instance of each serves every record."""

    __slots__ = ("attr",)

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def __get__(self, instance: Any, owner: type) -> Any:
        value = _standard_fields(owner) if self.attr == "__dataclass_fields__" \
            else _params(*owner._record_flags)  # type: ignore[attr-defined]
        type.__setattr__(owner, self.attr, value)
        return value


_STANDARD_FIELDS = _Standard("__dataclass_fields__")
_STANDARD_PARAMS = _Standard("__dataclass_params__")


def _standard_fields(cls: type) -> dict[str, Any]:
    import dataclasses

    out = {}
    for name, f in cls._record_fields.items():  # type: ignore[attr-defined]
        made = f.standard or dataclasses.field(
            default=_standard_missing(f.default), init=f.init, repr=f.repr, compare=f.compare,
            default_factory=_standard_missing(f.default_factory))
        made.name, made.type = name, f.type
        made._field_type = dataclasses._FIELD  # type: ignore[attr-defined]
        if made.kw_only is dataclasses.MISSING:  # as the standard decorator resolves it
            made.kw_only = False
        out[name] = made
    return out


def _standard_missing(value: Any) -> Any:
    import dataclasses

    return dataclasses.MISSING if value is _MISSING else value


def _params(frozen: bool, eq: bool) -> Any:
    """What the standard decorator records per class (it checks a base's `frozen` flag):
    a copy of a template's, every slot copied so that it holds across Python versions."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class _Template:
        pass

    template = _Template.__dataclass_params__  # type: ignore[attr-defined]
    params = object.__new__(type(template))
    for slot in type(template).__slots__:
        object.__setattr__(params, slot, getattr(template, slot))
    object.__setattr__(params, "frozen", frozen)
    object.__setattr__(params, "eq", eq)
    return params


def _is_classvar(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _inherited(cls: type) -> dict[str, Field]:
    """The fields of `cls`'s bases: records' own, standard dataclasses' converted."""
    out: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        if "_record_fields" in base.__dict__:
            out.update(base.__dict__["_record_fields"])
        elif "__dataclass_fields__" in base.__dict__:  # a standard dataclass: it is imported
            for name, f in base.__dict__["__dataclass_fields__"].items():
                if f._field_type is sys.modules["dataclasses"]._FIELD:
                    out[name] = _from_standard(f)
    return out


def _from_standard(f: Any) -> Field:
    missing = sys.modules["dataclasses"].MISSING
    own = Field(_MISSING if f.default is missing else f.default,
                _MISSING if f.default_factory is missing else f.default_factory,
                f.init, f.repr, f.compare, standard=f)
    own.name, own.type = f.name, f.type
    return own


def _own_field(cls: type, name: str, annotation: Any) -> Field:
    value = cls.__dict__.get(name, _MISSING)
    standard = sys.modules.get("dataclasses")
    if standard is not None and isinstance(value, standard.Field):
        f = _from_standard(value)
    elif isinstance(value, Field):
        f = value
    else:
        f = Field(default=value)
    if isinstance(value, Field) or f.standard is not None:
        if f.default is _MISSING:
            delattr(cls, name)
        else:
            setattr(cls, name, f.default)
    f.name, f.type = name, annotation
    if f.standard is not None:
        f.standard.name, f.standard.type = name, annotation
    return f


def _record(cls: type, frozen: bool, eq: bool) -> type:
    fields = _inherited(cls)
    own = cls.__dict__
    for name, annotation in own.get("__annotations__", {}).items():
        if not _is_classvar(annotation):
            fields[name] = _own_field(cls, name, annotation)
    cls._record_fields = fields  # type: ignore[attr-defined]
    cls._record_flags = (frozen, eq)  # type: ignore[attr-defined]
    cls.__dataclass_fields__ = _STANDARD_FIELDS  # type: ignore[attr-defined]
    cls.__dataclass_params__ = _STANDARD_PARAMS  # type: ignore[attr-defined]
    compared = tuple(n for n, f in fields.items() if f.compare)
    if eq:  # eq=False keeps what the bases compare (the standard decorator leaves it too)
        cls._record_key = staticmethod(_getter(compared))  # type: ignore[attr-defined]
    cls.__match_args__ = tuple(n for n, f in fields.items() if f.init)  # type: ignore
    methods: dict[str, Callable | None] = {"__init__": _first_init, "__repr__": _repr}
    if frozen:
        methods.update(__setattr__=_setattr, __delattr__=_delattr)
    if eq:  # mutable and compared: unhashable, as the standard decorator makes it
        methods.update(__eq__=_eq, __hash__=_hash if frozen else None)
    for attr, fn in methods.items():
        # as the standard decorator: methods the class defines stay (an `__eq__` of its own
        # leaves `__hash__` None implicitly, which still gets the generated hash)
        if attr not in own or (attr == "__hash__" and own[attr] is None and "__eq__" in own):
            setattr(cls, attr, fn)
    return cls


def _with_slots(cls: type, frozen: bool) -> type:
    """`cls` made again with `__slots__` for the fields its bases do not hold, as the
    standard decorator's `slots=True` does: defaults live in the fields (the class may not
    hold them where the slots are), methods that call `super()` see the new class, and a
    frozen one copies and pickles through `__getstate__` / `__setstate__`."""
    inherited = {name for base in cls.__mro__[1:] for name in getattr(base, "__slots__", ())}
    own = tuple(n for n in cls._record_fields if n not in inherited)  # type: ignore[attr-defined]
    body = {k: v for k, v in cls.__dict__.items()
            if k not in own and k not in ("__dict__", "__weakref__")}
    body["__slots__"] = own
    if frozen:
        body.setdefault("__getstate__", _getstate)
        body.setdefault("__setstate__", _setstate)
    slotted = type(cls)(cls.__name__, cls.__bases__, body)
    slotted.__qualname__ = cls.__qualname__
    for value in body.values():
        _point_class_cell(value, cls, slotted)
    return slotted


def _point_class_cell(value: Any, old: type, new: type) -> None:
    """Methods that use `super()` or `__class__` hold the class in a cell: the new one."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    functions = (value.fget, value.fset, value.fdel) if isinstance(value, property) else (value,)
    for fn in functions:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                if cell.cell_contents is old:
                    cell.cell_contents = new
            except ValueError:  # an empty cell: a name the method reads, not yet bound
                continue


def _getstate(self) -> tuple:
    return tuple(getattr(self, n) for n in self._record_fields)


def _setstate(self, state: tuple) -> None:
    for name, value in zip(self._record_fields, state):
        object.__setattr__(self, name, value)


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    if not names:
        return lambda self: ()
    if len(names) == 1:
        get = operator.attrgetter(names[0])
        return lambda self: (get(self),)
    return operator.attrgetter(*names)


def _first_init(self, *args: Any, **kwargs: Any) -> None:
    """Bind the arguments by hand; on the class's `COMPILE_AFTER`-th instance, compile its
    `__init__` and install it instead."""
    cls = type(self)
    built, params = _built.get(cls) or (0, _init_params(cls))
    if built + 1 < COMPILE_AFTER:
        _built[cls] = (built + 1, params)
        _bind(self, cls, params, args, kwargs)
        return
    _built.pop(cls, None)
    init = _compile_init(cls)
    cls.__init__ = init
    init(self, *args, **kwargs)


def _init_params(cls: type) -> tuple[tuple[str, Any, Any], ...]:
    return tuple((n, f.default, f.default_factory)
                 for n, f in cls._record_fields.items() if f.init)  # type: ignore[attr-defined]


def _bind(self, cls: type, params: tuple, args: tuple, kwargs: dict[str, Any]) -> None:
    """What the compiled `__init__` does, argument errors included."""
    if len(args) > len(params):
        raise TypeError(f"{cls.__qualname__}.__init__() takes {len(params) + 1} positional "
                        f"arguments but {len(args) + 1} were given")
    for (name, _, _), value in zip(params, args):
        object.__setattr__(self, name, value)
    missing = []
    for name, default, factory in params[len(args):]:
        if name in kwargs:
            value = kwargs.pop(name)
        elif default is not _MISSING:
            value = default
        elif factory is not _MISSING:
            value = factory()
        else:
            missing.append(repr(name))
            continue
        object.__setattr__(self, name, value)
    if missing:
        raise TypeError(f"{cls.__qualname__}.__init__() missing {len(missing)} required "
                        f"positional argument{'s' * (len(missing) > 1)}: {', '.join(missing)}")
    for name in kwargs:
        how = "multiple values for" if any(p[0] == name for p in params) else \
            "an unexpected keyword"
        raise TypeError(f"{cls.__qualname__}.__init__() got {how} argument {name!r}")
    if hasattr(cls, "__post_init__"):
        self.__post_init__()


def _compile_init(cls: type) -> Callable[..., None]:
    fields = [f for f in cls._record_fields.values() if f.init]  # type: ignore[attr-defined]
    scope: dict[str, Any] = {"__setattr": object.__setattr__, "_FACTORY": _MISSING}
    params, body = [], []
    for f in fields:
        if f.default is not _MISSING:
            scope[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not _MISSING:
            scope[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            body.append(f"if {f.name} is _FACTORY: {f.name} = _f_{f.name}()")
        else:
            params.append(f.name)
        body.append(f"__setattr(self, {f.name!r}, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}):\n    " + "\n    ".join(body or ["pass"])
    exec(source, scope)  # noqa: S102  (the standard decorator does the same, per method)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _repr(self) -> str:
    parts = ", ".join(f"{n}={getattr(self, n)!r}" for n, f in self._record_fields.items()
                      if f.repr)
    return f"{type(self).__qualname__}({parts})"


def _eq(self, other: Any) -> Any:
    if other.__class__ is self.__class__:
        return self._record_key(self) == other._record_key(other)
    return NotImplemented


def _hash(self) -> int:
    return hash(self._record_key(self))


def _setattr(self, name: str, value: Any) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self, name: str) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot delete field {name!r}")
