"""Control-flow and recurrence kernels.

If, Loop and Scan are builders: their subgraphs are compiled once, with the outer graph,
and each run calls them positionally. LSTM, GRU and RNN share one driver: it projects the
inputs of every time step with a single matmul, then steps a per-op *cell* through time
(one batched matmul per step), masking finished sequences; the cells differ only in their
gate equations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from rlx.errors import KernelError
from rlx.ir.ops.control import (
    GRU,
    LSTM,
    RNN,
    RNN_ACTIVATIONS,
    Composite,
    Fail,
    If,
    Loop,
    QuantizedLSTM,
    RnnDirection,
    Scan,
)
from rlx.ir.shape import Shape, normalize_axis
from rlx.kernels.products import matrix_product
from rlx.kernels.registry import builder, kernel
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = [
    "build_composite", "build_if", "build_loop", "build_scan", "Activation", "Recurrent",
    "States", "Step", "build_recurrence", "build_quantized_lstm", "fail",
]


# -- If / Loop / Scan ----------------------------------------------------------------------
def _flag(value: np.ndarray):
    """The Python value of a one-element tensor (a condition or a trip count)."""
    if value.size != 1:
        raise ValueError(f"expected a one-element tensor, got shape {list(value.shape)}")
    return value.reshape(()).item()


def _stack(items: Sequence[np.ndarray], axis: int, shape: Shape) -> np.ndarray:
    """Per-iteration values stacked on `axis`.

    With no iteration there is nothing to take the other dims from: they are the declared
    static ones (0 where unknown).
    """
    if items:
        return np.stack(items, axis=axis)
    return np.zeros([d if isinstance(d, int) else 0 for d in shape.dims], shape.dtype.numpy)


@builder(Composite)
def build_composite(node, compile):
    """The body, on the op's inputs; a tuple-valued node gives all the body's outputs."""
    body = compile(node.op.body)
    if node.is_tuple:
        return lambda *inputs: tuple(body.call(*inputs))
    return lambda *inputs: body.call(*inputs)[0]


@builder(If)
def build_if(node, compile):
    then, other = compile(node.op.then_branch), compile(node.op.else_branch)

    def run(cond, *captured):
        return tuple((then if _flag(cond) else other).call(*captured))

    return run


@builder(Loop)
def build_loop(node, compile):
    body = compile(node.op.body)
    n = node.op.n_carried
    # iter_num and cond take the rank the body declares for them (0, or 1 for [1])
    iter_dims, cond_dims = ((1,) * i.shape.rank for i in node.op.body.inputs()[:2])
    scan_shapes = node.shape[n:]

    def run(max_trip, cond, *rest):
        carried, captured = rest[:n], rest[n:]
        scans: list[list[np.ndarray]] = [[] for _ in scan_shapes]
        trips, going = _flag(max_trip), bool(_flag(cond))
        i = 0
        while i < trips and going:
            outs = body.call(np.full(iter_dims, i, np.int64), np.full(cond_dims, going),
                             *carried, *captured)
            going = bool(_flag(outs[0]))
            carried = outs[1:1 + n]
            for acc, value in zip(scans, outs[1 + n:]):
                acc.append(value)
            i += 1
        return (*carried, *(_stack(acc, 0, s) for acc, s in zip(scans, scan_shapes)))

    return run


@builder(Scan)
def build_scan(node, compile):
    op = node.op
    body = compile(op.body)
    n = op.n_state
    m = len(node.inputs) - n
    # a scan input has one more dim than the slice the body declares for it
    ranks = [i.shape.rank + 1 for i in op.body.inputs()[n:]]
    in_axes = [normalize_axis(a, r) for a, r in zip(op.input_axes(m), ranks)]
    in_dirs = op.input_directions(m)
    out_shapes = node.shape[n:]
    out_axes = [normalize_axis(a, s.rank) for a, s in
                zip(op.output_axes(len(out_shapes)), out_shapes)]
    out_dirs = op.output_directions(len(out_shapes))

    def run(*args):
        state, xs = args[:n], args[n:]
        lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
        if len(lengths) != 1:
            raise ValueError(f"scan inputs differ in length along their axes: {sorted(lengths)}")
        length = lengths.pop()
        collected: list[list[np.ndarray]] = [[] for _ in out_shapes]
        for t in range(length):
            slices = [x[(slice(None),) * a + (length - 1 - t if d else t,)]
                      for x, a, d in zip(xs, in_axes, in_dirs)]
            outs = body.call(*state, *slices)
            state = outs[:n]
            for acc, value in zip(collected, outs[n:]):
                acc.append(value)
        stacked = (_stack(acc[::-1] if d else acc, a, s)
                   for acc, a, d, s in zip(collected, out_axes, out_dirs, out_shapes))
        return (*state, *stacked)

    return run


# -- recurrences ---------------------------------------------------------------------------
def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) on one buffer (exp overflowing to inf gives the right 0)."""
    t = np.negative(x)
    np.exp(t, out=t)  # (runs inside the session's np.errstate)
    t += 1
    return np.reciprocal(t, out=t)


Activation = Callable[[np.ndarray], np.ndarray]
Recurrent = LSTM | GRU | RNN

# name -> (f(x, alpha, beta), default alpha, default beta); None = the function takes none
_ACTIVATIONS: dict[str, tuple[Callable[..., np.ndarray], float | None, float | None]] = {
    "relu": (lambda x, a, b: np.maximum(x, 0), None, None),
    "tanh": (lambda x, a, b: np.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: _sigmoid(x), None, None),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: np.where(x >= a, x, 0), 1.0, None),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))), 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), None, None),
    "softplus": (lambda x, a, b: np.logaddexp(x, 0), None, None),
}
assert set(_ACTIVATIONS) == {a.lower() for a in RNN_ACTIVATIONS}


def _activations(op: Recurrent) -> list[list[Activation]]:
    """Per direction, the op's activation functions with their alpha and beta bound.

    As in onnxruntime, each function that takes an alpha (beta) consumes the next value of
    `activation_alpha` (`activation_beta`) and falls back to its default when they run out.
    """
    alphas, betas = iter(op.activation_alpha), iter(op.activation_beta)
    funcs: list[Activation] = []
    for name in op.activation_names():
        fn, alpha, beta = _ACTIVATIONS[name]
        alpha = 0.0 if alpha is None else next(alphas, alpha)
        beta = 0.0 if beta is None else next(betas, beta)
        funcs.append(functools.partial(fn, a=alpha, b=beta))
    per = len(op.default_activations)
    return [funcs[i:i + per] for i in range(0, len(funcs), per)]


@dataclass(frozen=True)
class _Weights:
    """One direction's recurrent weights (compute dtype) and its gate functions."""

    r_t: np.ndarray  # R^T, [hidden, gates * hidden]
    w_bias: np.ndarray  # Wb, [gates * hidden]
    r_bias: np.ndarray  # Rb, [gates * hidden]
    peepholes: np.ndarray | None  # LSTM's P (i, o, f), [3 * hidden]
    acts: Sequence[Activation]
    clip: Activation  # bounds a gate's pre-activation (identity without `clip`)


States = tuple[np.ndarray, ...]
Step = Callable[[np.ndarray, States], States]
"""A cell's step: the states are [batch, hidden] matrices, multiplied by R^T with
`matrix_product` (`ndarray.dot` for a small batch: less setup per timestep)."""


def _lstm_cell(op: LSTM, p: _Weights) -> tuple[np.ndarray, Step]:
    f, g, h = p.acts
    if p.peepholes is None and not op.input_forget:
        return p.w_bias + p.r_bias, _plain_lstm_step(op.hidden_size, p)
    pi, po, pf = (0, 0, 0) if p.peepholes is None else np.split(p.peepholes, 3)

    def step(xw: np.ndarray, states: States) -> States:
        h_prev, c_prev = states
        i, o, forget, c = np.split(xw + matrix_product(h_prev, p.r_t), 4, axis=-1)
        i = f(p.clip(i + pi * c_prev))
        forget = 1 - i if op.input_forget else f(p.clip(forget + pf * c_prev))
        c = forget * c_prev + i * g(p.clip(c))
        o = f(p.clip(o + po * c))  # the output gate's peephole sees the new cell
        return o * h(c), c

    return p.w_bias + p.r_bias, step


def _plain_lstm_step(hidden: int, p: _Weights,
                     recur: Callable[[np.ndarray], np.ndarray] | None = None,
                     bias: np.ndarray | None = None) -> Step:
    """The LSTM step without peepholes or coupled gates: the gates (ONNX order i, o, f, c)
    are one [batch, 4H] product (`recur(h_prev)`, by default h_prev @ R^T) plus xw (plus
    `bias` where xw holds none), clipped at once, and i, o, f (adjacent) go through `f`
    in one call; the state update reuses the fresh buffers."""
    f, g, h = p.acts
    clip = p.clip
    h1, h2, h3 = hidden, 2 * hidden, 3 * hidden
    if recur is None:
        r_t = p.r_t

        def recur(h_prev: np.ndarray) -> np.ndarray:
            return matrix_product(h_prev, r_t)

    def step(xw: np.ndarray, states: States) -> States:
        h_prev, c_prev = states
        gates = recur(h_prev)
        gates += xw
        if bias is not None:
            gates += bias
        gates = clip(gates)
        ifo = f(gates[:, :h3])
        c = g(gates[:, h3:])
        c *= ifo[:, :h1]  # i * g(c~)
        c += ifo[:, h2:h3] * c_prev  # + f * c_prev
        return ifo[:, h1:h2] * h(c), c

    return step


def _gru_cell(op: GRU, p: _Weights) -> tuple[np.ndarray, Step]:
    """The GRU step on fresh buffers, z and r through `f` in one call, and the new state
    as hidden + z (h_prev - hidden). With linear_before_reset the whole recurrent part is
    one [batch, 3H] product; without, the h gate's product reads r * h_prev, a second one."""
    f, g = p.acts
    clip, hs = p.clip, op.hidden_size
    zr = 2 * hs
    rb_h = p.r_bias[zr:]

    def blend(xw: np.ndarray, gates: np.ndarray, h_prev: np.ndarray, hidden: Callable) -> States:
        gates += xw[:, :zr]
        zr_gates = f(clip(gates))
        h = hidden(zr_gates[:, hs:])  # given r
        h += xw[:, zr:]
        h = g(clip(h))
        out = h_prev - h
        out *= zr_gates[:, :hs]
        out += h
        return (out,)

    if op.linear_before_reset:
        r_t = p.r_t

        def step(xw: np.ndarray, states: States) -> States:
            (h_prev,) = states
            rec = matrix_product(h_prev, r_t)

            def hidden(r: np.ndarray) -> np.ndarray:
                h = rec[:, zr:]
                h += rb_h
                h *= r
                return h

            return blend(xw, rec[:, :zr], h_prev, hidden)
    else:
        r_zr, r_h = (np.ascontiguousarray(a) for a in (p.r_t[:, :zr], p.r_t[:, zr:]))

        def step(xw: np.ndarray, states: States) -> States:
            (h_prev,) = states
            return blend(xw, matrix_product(h_prev, r_zr), h_prev,
                         lambda r: matrix_product(r * h_prev, r_h))

    # Rb of the h gate is additive only when the reset gate comes first
    r_bias = np.concatenate([p.r_bias[:zr], np.zeros_like(rb_h) if op.linear_before_reset
                             else rb_h])
    return p.w_bias + r_bias, step


def _rnn_cell(op: RNN, p: _Weights) -> tuple[np.ndarray, Step]:
    (f,) = p.acts

    def step(xw: np.ndarray, states: States) -> States:
        return (f(p.clip(xw + matrix_product(states[0], p.r_t))),)

    return p.w_bias + p.r_bias, step


# op type -> (cell factory, the ONNX inputs holding its initial states)
_CELLS: dict[type, tuple[Callable[..., tuple], tuple[str, ...]]] = {
    LSTM: (_lstm_cell, ("initial_h", "initial_c")),
    QuantizedLSTM: (_lstm_cell, ("initial_h", "initial_c")),
    GRU: (_gru_cell, ("initial_h",)),
    RNN: (_rnn_cell, ("initial_h",)),
}


@builder(LSTM, GRU, RNN)
def build_recurrence(node, compile):
    op = node.op
    acts = _activations(op)  # resolved once, at compile time
    clip = _clipper(op.clip)
    dtype = node.shape[0].dtype.numpy

    cache: list[tuple] = [((), [])]  # (the arrays the layout came from, the layout)

    def run(x, w, r, *optional):
        opt = dict(zip(op.present, optional))
        cdt = np.float64 if x.dtype == np.float64 else np.float32  # f16/bf16 in f32
        key = (cdt, w, r, opt.get("B"), opt.get("P"))
        sources, laid = cache[0]
        if len(sources) != len(key) or any(a is not b for a, b in zip(sources, key)):
            laid = _lay_out(op, acts, clip, cdt, w, r, opt)
            cache[0] = (key, laid)  # constants are the same arrays every run
        outs = _recurrence(op, laid, cdt, x, opt)
        return tuple(np.ascontiguousarray(a, dtype=dtype) for a in outs)

    return run


@dataclass(frozen=True)
class _Direction:
    """One direction's weights as the run reads them, laid out once per weight array."""

    project: Callable[[np.ndarray], np.ndarray]  # [steps * batch, input] -> xw
    step: Step


def _projection(w_t: np.ndarray, in_bias: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """x W^T + the biases that add to it (Wb + Rb, per cell); w_t C-contiguous."""
    def project(xs: np.ndarray) -> np.ndarray:
        xw = xs @ w_t
        xw += in_bias
        return xw

    return project


def _lay_out(op: Recurrent, acts: list[list[Activation]], clip: Activation, cdt,
             w: np.ndarray, r: np.ndarray, opt: dict[str, np.ndarray]) -> list[_Direction]:
    """Transposed, contiguous, gates concatenated and biases summed, per direction: the
    work a run would otherwise redo on every call (a one-chunk VAD runs one time step)."""
    make_cell, _ = _CELLS[type(op)]
    w, r = (a.astype(cdt, copy=False) for a in (w, r))
    dirs, gh = op.direction.count, w.shape[1]
    bias = _optional(opt, "B", (dirs, 2 * gh), cdt)
    peepholes = opt.get("P")
    laid = []
    for d in range(dirs):
        weights = _Weights(np.ascontiguousarray(r[d].T), bias[d, :gh], bias[d, gh:],
                           None if peepholes is None else peepholes[d].astype(cdt), acts[d],
                           clip)
        in_bias, step = make_cell(op, weights)
        laid.append(_Direction(_projection(np.ascontiguousarray(w[d].T), in_bias), step))
    return laid


def _clipper(bound: float | None) -> Activation:
    if bound is None:
        return lambda x: x
    return lambda x: np.clip(x, -bound, bound)


def _recurrence(op: Recurrent, laid: list[_Direction], cdt, x: np.ndarray,
                opt: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """ONNX LSTM/GRU/RNN in time-major form; returns (Y, *final states)."""
    _, state_names = _CELLS[type(op)]
    x = x.astype(cdt, copy=False)
    if op.layout:
        x = x.swapaxes(0, 1)
    steps, batch, _ = x.shape
    dirs = op.direction.count
    shape = (dirs, batch, op.hidden_size)
    initial = [_optional(opt, n, shape, cdt, swap=bool(op.layout)) for n in state_names]
    lens = opt.get("sequence_lens")
    if lens is not None:
        lens = lens.astype(np.int64)
        if np.any((lens < 0) | (lens > steps)):
            raise ValueError(f"sequence_lens must be in [0, {steps}], got {lens.tolist()}")
    ys, finals = [], []
    for d, lay in enumerate(laid):
        reverse = op.direction is RnnDirection.REVERSE or d == 1
        order = _time_order(steps, batch, lens, reverse)
        xs = _gather(x, order)
        xw = lay.project(xs.reshape(-1, xs.shape[-1])).reshape(steps, batch, -1)
        y, final = _unroll(lay.step, xw, tuple(s[d] for s in initial), lens)
        ys.append(_gather(y, order))
        finals.append(final)
    if len(laid) == 1:  # views with the dirs axis (np.stack copies, ~5 us each)
        y, states = ys[0][:, None], [s[None] for s in finals[0]]
    else:
        y = np.stack(ys, axis=1)  # [seq, dirs, batch, hidden]
        states = [np.stack(s) for s in zip(*finals)]  # each [dirs, batch, hidden]
    if op.layout:
        return (y.transpose(2, 0, 1, 3), *(s.swapaxes(0, 1) for s in states))
    return (y, *states)


def _optional(opt: dict[str, np.ndarray], name: str, shape: tuple[int, ...], cdt,
              swap: bool = False) -> np.ndarray:
    """An optional input in the compute dtype and time-major layout; zeros when absent."""
    value = opt.get(name)
    if value is None:
        return np.zeros(shape, cdt)
    return (value.swapaxes(0, 1) if swap else value).astype(cdt, copy=False)


def _time_order(steps: int, batch: int, lens: np.ndarray | None,
                reverse: bool) -> np.ndarray | None:
    """`[step, batch]` time index each step reads, or None for the identity.

    The reverse direction reads each sequence backwards from its own last valid step; its
    padding steps stay in place (they are masked). The map is its own inverse, so the
    same gather puts the outputs back in time order.
    """
    if not reverse:
        return None
    t = np.arange(steps)[:, None]
    length = np.full(batch, steps) if lens is None else lens
    return np.where(t < length, length - 1 - t, t)


def _gather(a: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    return a if order is None else a[order, np.arange(a.shape[1])]


def _unroll(step: Step, xw: np.ndarray, states: States,
            lens: np.ndarray | None) -> tuple[np.ndarray, States]:
    """Step through time; past a sequence's length its state holds and its output is 0."""
    y = np.zeros((xw.shape[0], *states[0].shape), xw.dtype)
    for t in range(xw.shape[0]):
        new = step(xw[t], states)
        if lens is None:
            y[t] = new[0]
        else:
            live = (t < lens)[:, None]
            new = tuple(np.where(live, a, b) for a, b in zip(new, states))
            y[t] = np.where(live, new[0], 0)
        states = new
    return y, states


# -- onnxruntime's DynamicQuantizeLSTM -------------------------------------------------------
def _quantized_uint8(a: np.ndarray, by_row: bool) -> tuple[np.ndarray, np.ndarray]:
    """a [M, K] quantised to uint8 as onnxruntime's dynamic GEMM does, minus its zero point
    (in float64, for an exact product), and the scale ([M, 1] by row, else one): the range
    [min, max] widened to hold 0, scale (max - min) / 255 (1 for an all-zero range), zero
    point round(-min / scale), values saturate(round(a / scale) + zero point), rounded half
    to even."""
    axis = 1 if by_row else None
    lo = np.minimum(a.min(axis, keepdims=True, initial=0), 0).astype(np.float32)
    hi = np.maximum(a.max(axis, keepdims=True, initial=0), 0).astype(np.float32)
    scale = np.where(hi == lo, np.float32(1), (hi - lo) / np.float32(255))
    zero = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
    q = np.clip(np.rint(a / scale) + zero, 0, 255)
    return q.astype(np.float64) - zero, scale


def _quantized_product(weight: np.ndarray, scale: np.ndarray, zero: np.ndarray,
                       by_row: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """a -> float32(qa @ (weight - zero)) * float32(a_scale * scale): onnxruntime's GEMM of
    a dynamically quantised a [M, K] (`by_row`: each row with its own parameters) with
    8-bit weights [K, N] (scale and zero per tensor or per column N); the integer products
    are summed exactly (float64 holds them)."""
    centred = weight.astype(np.float64) - zero.astype(np.float64)

    def product(a: np.ndarray) -> np.ndarray:
        qa, a_scale = _quantized_uint8(a, by_row)
        return (qa @ centred).astype(np.float32) * (a_scale * scale)

    return product


def _splits_batch(batch: int, hidden: int) -> bool:
    """Whether onnxruntime's LSTM partitions the batch across threads, each part with its
    own quantisation of H: rlx takes one sequence per part, what onnxruntime does with at
    least `batch` threads."""
    return batch > 4 or (batch >= 2 and hidden <= 256)


def _lay_out_quantized(op: QuantizedLSTM, acts: list[list[Activation]], clip: Activation,
                       w: np.ndarray, r: np.ndarray, opt: dict[str, np.ndarray],
                       batch: int) -> list[_Direction]:
    """Per direction: X W^T and H R^T as onnxruntime's quantised GEMMs, the biases (Wb + Rb)
    added to the gates after both, as its LSTM kernel orders the sums."""
    dirs, gh = op.direction.count, w.shape[1]
    bias = _optional(opt, "B", (dirs, 2 * gh), np.float32)
    laid = []
    for d in range(dirs):
        weights = _Weights(r[d].T, bias[d, :gh], bias[d, gh:], None, acts[d], clip)
        recur = _quantized_product(r[d].T, opt["R_scale"][d], opt["R_zero_point"][d],
                                   _splits_batch(batch, op.hidden_size))
        step = _plain_lstm_step(op.hidden_size, weights, recur, bias[d, :gh] + bias[d, gh:])
        project = _quantized_product(w[d].T, opt["W_scale"][d], opt["W_zero_point"][d])
        laid.append(_Direction(project, step))
    return laid


@builder(QuantizedLSTM)
def build_quantized_lstm(node, compile):
    op = node.op
    acts, clip = _activations(op), _clipper(op.clip)

    def run(x, w, r, *optional):
        opt = dict(zip(op.present, optional))
        batch = x.shape[0 if op.layout else 1]
        laid = _lay_out_quantized(op, acts, clip, w, r, opt, batch)
        outs = _recurrence(op, laid, np.float32, x, opt)
        return tuple(np.ascontiguousarray(a, dtype=np.float32) for a in outs)

    return run


@kernel(Fail)
def fail(node):
    raise KernelError(f"{node.label}: {node.op.message}")
