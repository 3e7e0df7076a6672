"""Stateful streaming: `Model.stream()` feeds a model's state outputs back as the next
call's inputs (a voice-activity detector's `stateN` -> `state`, an RNN's `hn` -> `h0`), the
loop every caller of such a model writes otherwise.

Pairs are given as {output: input} or found by name and shape: an output and an input pair
when one name is the other with a state mark added (`state`/`stateN`, `h0`/`hn`,
`h_in`/`h_out`, `prev_x`/`next_x`) and their dtypes and shapes agree. The first call feeds
zeros (symbolic dims sized by the paired output's declared shape) or the given `initial`.

The state is kept as the very arrays the engine returned, handed to the next call without a
copy. A stream's state belongs to one sequence, so a `Stream` runs only on the thread that
opened it (`StreamThreadError` elsewhere); the `Model` stays shareable: open one stream per
thread.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlx.engines.calls import RunArgument, RunArguments
from rlx.errors import InputError, StreamThreadError
from rlx.ir.dtype import DType
from rlx.ir.shape import Shape
from rlx.runtime.feeds import conform_feed

if TYPE_CHECKING:
    from rlx.engines.model import IoSpec, Model

__all__ = ["Stream", "find_state_pairs"]

INPUT_MARKS = (("", "0"), ("", "_0"), ("", "_in"), ("in_", ""), ("", "_prev"), ("prev_", ""),
               ("past_", ""))
OUTPUT_MARKS = (("", "N"), ("", "n"), ("", "_n"), ("", "_out"), ("out_", ""), ("", "_next"),
                ("next_", ""), ("", "_new"), ("new_", ""), ("present_", ""))
"""(prefix, suffix) marks a state input's and a state output's names carry around a stem."""


class Stream:
    """One stream through a `Model`: `run(feeds)` takes the non-state inputs, feeds the
    state, keeps the returned state for the next call, and returns the outputs not fed
    back (or the ones named). `state` is the state the next call feeds; `reset()` starts
    over. `stream(...)` is `stream.run(...)`."""

    def __init__(self, model: Model, state_map: Mapping[str, str] | None = None,
                 initial: Mapping[str, Any] | None = None):
        self._model = model
        outputs = [spec.name for spec in model.outputs]
        self._pairs = dict(state_map) if state_map is not None else find_state_pairs(model)
        _check_pairs(model, self._pairs)
        self._feedback = [(outputs.index(out), name) for out, name in self._pairs.items()]
        self._index = {name: k for k, name in enumerate(outputs)}
        self._shown = [k for k, name in enumerate(outputs) if name not in self._pairs]
        fed = [s.name for s in model.inputs if s.name not in self._pairs.values()]
        self._arguments = RunArguments("stream.run", fed, outputs)
        self._thread = threading.get_ident()
        self._initial = self._start(initial or {})
        self._state = dict(self._initial)

    @property
    def pairs(self) -> dict[str, str]:
        """{output: the input it feeds at the next call}."""
        return dict(self._pairs)

    @property
    def state(self) -> dict[str, np.ndarray]:
        """The state the next call feeds, by input name (the arrays themselves)."""
        return dict(self._state)

    def reset(self, initial: Mapping[str, Any] | None = None) -> None:
        """Start over from the stream's initial state, or from `initial` {input: array}
        (inputs left out start from zeros)."""
        if threading.get_ident() != self._thread:
            raise self._wrong_thread()
        if initial is not None:
            self._initial = self._start(initial)
        self._state = dict(self._initial)

    def run(self, feeds: RunArgument, outputs: RunArgument = None) -> list[np.ndarray]:
        """One step: `feeds` the non-state inputs (a dict, or a bare array when one is
        left), in either argument order as `Model.run` takes them."""
        if threading.get_ident() != self._thread:
            raise self._wrong_thread()
        if outputs is not None or feeds.__class__ is not dict:
            feeds, outputs = self._arguments.read(feeds, outputs)
        state = self._state
        merged = {**feeds, **state}
        if len(merged) != len(feeds) + len(state):
            raise InputError(self._state_fed(feeds))
        values = self._model.run(merged)
        for k, name in self._feedback:
            state[name] = values[k]
        if outputs is None:
            return [values[k] for k in self._shown]
        return [values[k] for k in self._wanted(outputs)]

    __call__ = run

    def run_sequence(self, feeds: Mapping[str, Any], outputs: Sequence[str] | None = None
                     ) -> list[np.ndarray]:
        """Every step of a sequence: an input given with one more dim than it declares is
        stepped along its first axis, the others are fed unchanged at every step (a sample
        rate). Returns each output stacked over the steps."""
        ranks = {spec.name: len(spec.shape) for spec in self._model.inputs}
        stepped = {name: value for name, value in feeds.items()
                   if name in ranks and np.ndim(value) == ranks[name] + 1}
        lengths = sorted({len(value) for value in stepped.values()})
        if len(lengths) != 1 or not lengths[0]:
            raise InputError(self._no_steps(ranks, stepped))
        fixed = {name: value for name, value in feeds.items() if name not in stepped}
        steps = [self.run({**fixed, **{name: value[k] for name, value in stepped.items()}},
                          outputs) for k in range(lengths[0])]
        return [np.stack(values) for values in zip(*steps)]

    def _no_steps(self, ranks: Mapping[str, int], stepped: Mapping[str, Any]) -> str:
        if not stepped:
            return (f"nothing to step over: give an input one more dim than it declares, "
                    f"steps first (declared ranks {dict(ranks)})")
        sizes = {name: len(value) for name, value in stepped.items()}
        return f"stepped inputs disagree on the number of steps (or have none): {sizes}"

    def _wrong_thread(self) -> StreamThreadError:
        return StreamThreadError(
            f"this stream of {self._model.name!r} belongs to the thread that opened it; "
            f"open one per thread: stream = model.stream()")

    def _start(self, initial: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The first call's state: `initial` checked as the inputs declare, zeros for the
        rest."""
        specs = _inputs(self._model)
        unknown = sorted(set(initial) - set(self._pairs.values()))
        if unknown:
            raise InputError(f"initial names {', '.join(map(repr, unknown))}, not a state "
                             f"input; state inputs are {sorted(self._pairs.values())}")
        outputs = {spec.name: spec for spec in self._model.outputs}
        start = {}
        for out, name in self._pairs.items():
            spec = specs[name]
            if name in initial:
                shape = Shape(spec.shape, DType.from_numpy(spec.dtype))
                start[name] = conform_feed(name, shape, initial[name])
            else:
                start[name] = np.zeros(_zero_shape(spec, outputs[out]), spec.dtype)
        return start

    def _state_fed(self, feeds: Mapping[str, Any]) -> str:
        fed = sorted(set(feeds) & set(self._state))
        return (f"{', '.join(map(repr, fed))}: the stream feeds its state itself; leave it "
                f"out ({self._arguments.example()}) or start from it: stream.reset({{...}})")

    def _wanted(self, outputs: Sequence[str] | str) -> list[int]:
        names = [outputs] if isinstance(outputs, str) else list(outputs)
        unknown = [n for n in names if n not in self._index]
        if unknown:
            raise InputError(f"unknown output(s) {', '.join(map(repr, unknown))}; "
                             f"model outputs are {list(self._index)}")
        return [self._index[n] for n in names]

    def __repr__(self) -> str:
        pairs = ", ".join(f"{out!r} -> {name!r}" for out, name in self._pairs.items())
        return f"Stream({self._model.name!r}, {{{pairs}}})"


def find_state_pairs(model: Model) -> dict[str, str]:
    """{output: input} for the outputs that name an input with state marks and agree with
    it in dtype and shape; an InputError when none or several would pair."""
    inputs = list(_inputs(model).values())
    pairs: dict[str, str] = {}
    for out in model.outputs:
        matches = [spec.name for spec in inputs if _names_pair(spec.name, out.name)
                   and _agree(spec, out)]
        if len(matches) > 1:
            raise InputError(f"output {out.name!r} pairs with inputs {matches}: name the pairs, "
                             f"model.stream({{{out.name!r}: {matches[0]!r}}})")
        if matches:
            pairs[out.name] = matches[0]
    if not pairs:
        raise InputError(
            f"no output of {model.name!r} is named as the next value of an input (like "
            f"'stateN' for 'state' or 'hn' for 'h0'): name the pairs, "
            f"model.stream({{'output': 'input'}}); inputs are {[s.name for s in inputs]}, "
            f"outputs are {[s.name for s in model.outputs]}")
    return pairs


def _check_pairs(model: Model, pairs: Mapping[str, str]) -> None:
    """Every pair names a real output and input, each input once, agreeing in dtype and
    shape."""
    inputs = _inputs(model)
    outputs = {spec.name: spec for spec in model.outputs}
    for out, name in pairs.items():
        if out not in outputs:
            raise InputError(f"state pair {out!r} -> {name!r}: no output {out!r}; "
                             f"outputs are {list(outputs)}")
        if name not in inputs:
            raise InputError(f"state pair {out!r} -> {name!r}: no input {name!r}; "
                             f"inputs are {list(inputs)}")
        if not _agree(inputs[name], outputs[out]):
            raise InputError(f"state pair {out!r} -> {name!r}: output is "
                             f"{_spelled(outputs[out])}, input is {_spelled(inputs[name])}")
    doubled = sorted({n for n in pairs.values() if list(pairs.values()).count(n) > 1})
    if doubled:
        raise InputError(f"state input(s) {doubled} fed from more than one output: "
                         f"pair each input once")


def _inputs(model: Model) -> dict[str, IoSpec]:
    return {spec.name: spec for spec in model.inputs}


def _stems(name: str, marks: tuple[tuple[str, str], ...]) -> set[str]:
    """`name` with each of `marks` that it carries taken off."""
    return {name[len(pre):len(name) - len(suf)] for pre, suf in marks
            if name.startswith(pre) and name.endswith(suf) and len(name) > len(pre + suf)}


def _names_pair(input_name: str, output_name: str) -> bool:
    """The output is the input's next value by name: stems equal once marks are off (one
    side may carry none: `state` / `stateN`)."""
    ins = _stems(input_name, INPUT_MARKS) | {input_name}
    outs = _stems(output_name, OUTPUT_MARKS) | {output_name}
    return input_name != output_name and bool(ins & outs)


def _agree(a: IoSpec, b: IoSpec) -> bool:
    """Same dtype and rank; fixed dims equal where both are fixed."""
    return a.dtype == b.dtype and len(a.shape) == len(b.shape) and all(
        x == y for x, y in zip(a.shape, b.shape) if isinstance(x, int) and isinstance(y, int))


def _zero_shape(spec: IoSpec, paired: IoSpec) -> tuple[int, ...]:
    """The input's declared shape, symbolic dims taken from the paired output's."""
    dims = [d if isinstance(d, int) else p for d, p in zip(spec.shape, paired.shape)]
    if not all(isinstance(d, int) for d in dims):
        raise InputError(f"state input {spec.name!r} is {_spelled(spec)}, and no declared "
                         f"shape fixes its size: start it, model.stream(initial="
                         f"{{{spec.name!r}: array}})")
    return tuple(int(d) for d in dims)


def _spelled(spec: IoSpec) -> str:
    return f"{spec.dtype}[{', '.join(map(str, spec.shape))}]"
