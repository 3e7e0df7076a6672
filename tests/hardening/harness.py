"""The fuzz contract, the targets it is checked on, and how one case is judged.

The contract (docs/reliability.md): whatever bytes a file holds, reading it (and, when it
reads, compiling and running what it describes) either succeeds or raises an
`rlx.errors.RlxError` subclass; nothing else escapes. A case takes at most `time_limit` of
CPU time (tracemalloc's overhead included; wall time would measure the machine's load), and
its peak of traced allocations stays under `SLACK + multiple x len(input)`, plus, once a
graph was read, `RUN_MULTIPLE x` the bytes its values declare (what the graph itself says
it computes; the harness refuses to feed graphs declaring more than `MAX_RUN_BYTES`).
numpy reports its buffers to `tracemalloc`, so the peak covers them; allocations made by C
libraries that do not report (protobuf, argon2) are bounded by an RLIMIT_AS cap around each
case instead, which turns a runaway allocation into a MemoryError (a violation too).

A case's *signature* names how it ended: the exception type and the rlx source lines that
raised it, per stage. Distinct signatures are distinct paths through the validation code,
which is what the corpus keeps one example of.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import random
import re
import resource
import signal
import threading
import time
import traceback
import tracemalloc
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import crypto, parse_rlx, read_rlx, read_rlxp
from rlx.artifact.model import TABLE
from rlx.deferred import materialize
from rlx.errors import IntegrityError, RlxError
from rlx.ir.graph import Graph
from rlx.ir.shape import Shape
from rlx.onnx import import_onnx
from rlx.runtime import Session
from rlx.weights import load_weights
from tests.hardening import mutate, seeds

SECONDS = 2.0  # the contract's limit per case, plus SECONDS_PER_KIB per KiB of input
SECONDS_PER_KIB = 0.08
"""Work linear in the input is allowed; more than linear is what the limit catches. A valid
ONNX model of 124 KB (6,340 nested nodes) takes 5.6 s of CPU under tracemalloc (1.5 s
untraced) to import, bake, compile and run: 46 ms per KiB, the most a 100,000-case run saw;
a 1,135-byte model expanding to 16,385 nodes (11 s) stays far over its 2.1 s."""
HARD_SECONDS = 20.0  # CPU seconds beyond the limit after which the harness interrupts
SLACK = 4 << 20  # bytes any case may use whatever its size (interpreter caches, buffers)
RUN_MULTIPLE = 4  # kernels' temporaries per declared value byte
MAX_RUN_BYTES = 64 << 20  # graphs declaring more than this are read, compiled, not run
MAX_FEED_ELEMENTS = 1 << 20
# A graph whose work depends on values (a Loop's trip count, a Range's length: any value of
# unknown size) computes what its constants say, as in any runtime: such a run gets at most
# MAX_RUN_BYTES and is stopped after DYNAMIC_RUN_SECONDS, which the time limit excuses.
DYNAMIC_RUN_SECONDS = 0.5
VERIFY_MODES = ("full", "lazy", "none")
# Encrypted cases run under caller caps: the default caps let a file ask for up to 1 GiB and
# 16 passes of Argon2 (seconds of work, by design); a caller opening untrusted files sets
# lower ones, as this harness does, so a header may not turn a case into a KDF benchmark.
KDF_LIMITS = crypto.KdfLimits(max_m_cost=1024, max_t_cost=2, max_p_cost=2)
ROOT = Path(__file__).resolve().parents[2]
RLX_SOURCE = str(ROOT / "src" / "rlx") + os.sep


class CaseTimeout(BaseException):
    """Raised into a case that ran past HARD_SECONDS (not an Exception: nothing swallows it)."""


class RunInterrupted(BaseException):
    """A data-dependent run stopped by the harness at DYNAMIC_RUN_SECONDS."""


class Inconsistent(Exception):
    """Verify modes disagree about the same bytes (a contract violation of its own)."""


@dataclass
class Allowance:
    """What a case may spend beyond its input: the bytes its graph declares, and the time
    of data-dependent runs the harness stopped."""

    declared: int = 0
    excused_seconds: float = 0.0


@dataclass(frozen=True)
class Target:
    name: str
    suffix: str  # the case is written to a file with this suffix
    multiple: int  # allowed peak bytes per input byte
    run: Callable[[bytes, Path, Allowance], str]  # -> how it ended, per stage
    mutate: Callable[[random.Random, Sequence[bytes]], bytes]
    seeds: Callable[[], dict[str, bytes]]
    prepare: Callable[[Path], None] = lambda workdir: None  # files a case may refer to


@dataclass(frozen=True)
class Outcome:
    target: str
    size: int
    signature: str
    seconds: float
    peak: int
    budget: int
    violation: str | None = None
    detail: str = field(default="", compare=False)


# -- judging one case ----------------------------------------------------------------------
def time_limit(size: int) -> float:
    """CPU seconds a case of `size` input bytes may take."""
    return SECONDS + SECONDS_PER_KIB * size / 1024


def check_case(target: Target, data: bytes, workdir: Path) -> Outcome:
    """Run one case under the contract; tracemalloc must be tracing (see `tracing`)."""
    path = workdir / f"case{target.suffix}"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a fresh inode: maps of the previous case stay valid
    path.write_bytes(data)
    allow = Allowance()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    limit = time_limit(len(data))
    start = time.process_time()  # CPU time: the figure must not depend on the machine's load
    violation, detail = None, ""
    try:
        with deadline(limit + HARD_SECONDS), address_space_cap((1 << 30) + 256 * len(data)), \
                quiet():
            signature = target.run(data, path, allow)
    except CaseTimeout:
        signature, violation = "timeout", f"interrupted after {limit + HARD_SECONDS:.1f} s"
    except Inconsistent as err:
        signature, violation = "inconsistent", str(err)
    except Exception as err:  # noqa: BLE001  (anything else reaching here breaks the contract)
        signature = f"escaped {where(err)}"
        violation = f"{type(err).__name__} escaped: {str(err)[:300]}"
        detail = "".join(traceback.format_exception(err))[-4000:]
    seconds = time.process_time() - start - allow.excused_seconds
    peak = tracemalloc.get_traced_memory()[1] - base
    budget = SLACK + target.multiple * len(data) + RUN_MULTIPLE * allow.declared
    if violation is None and seconds > limit:
        violation = f"took {seconds:.2f} s (limit {limit:.2f} s)"
    if violation is None and peak > budget:
        violation = f"allocated {peak} bytes, budget {budget} for {len(data)} input bytes"
    return Outcome(target.name, len(data), signature, seconds, peak, budget, violation, detail)


def where(err: BaseException) -> str:
    """The exception type and the last two rlx source lines it passed through; for an error
    translated from another (a library's, an internal one), where that one came from."""
    root = err
    while (root.__cause__ or root.__context__) is not None:
        root = root.__cause__ or root.__context__
    frames = traceback.extract_tb(root.__traceback__)
    ours = [f for f in frames if f.filename.startswith(RLX_SOURCE)]
    tail = "<".join(f"{f.filename[len(RLX_SOURCE):]}:{f.lineno}" for f in reversed(ours[-2:]))
    label = f"{type(err).__name__}@{tail or 'outside-rlx'}"
    if root is not err:
        last = frames[-1] if frames else None
        origin = f"{Path(last.filename).name}:{last.lineno}" if last else "?"
        label += f"/{type(root).__name__}@{origin}"
    return label


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Garbage values overflow and divide by zero: expected, and not worth a warning."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def tracing() -> Iterator[None]:
    """tracemalloc on for the block (numpy reports its buffers to it)."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        yield
    finally:
        if started:
            tracemalloc.stop()


@contextlib.contextmanager
def deadline(seconds: float, error: type[BaseException] = CaseTimeout) -> Iterator[None]:
    """Raise `error` into the main thread after `seconds` of CPU time (SIGPROF: it leaves
    the wall-clock timer of pytest-timeout alone), keeping an outer deadline running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise error()

    previous = signal.signal(signal.SIGPROF, expired)
    outer, _ = signal.setitimer(signal.ITIMER_PROF, seconds)
    start = time.process_time()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        if outer:
            left = outer - (time.process_time() - start)
            signal.setitimer(signal.ITIMER_PROF, max(left, 1e-3))


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def address_space_cap(extra: int) -> Iterator[None]:
    """RLIMIT_AS at the current size plus `extra`: a backstop that turns a runaway C-level
    allocation (invisible to tracemalloc) into a MemoryError instead of an OOM kill."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_size() + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# -- the .rlx target -----------------------------------------------------------------------
@dataclass
class _ModeResult:
    stage: str
    error: RlxError | None = None
    outputs: list[np.ndarray] | None = None

    @property
    def label(self) -> str:
        return f"{self.stage}:{where(self.error) if self.error else 'ok'}"


def _run_rlx(data: bytes, path: Path, allow: Allowance) -> str:
    results = {mode: _rlx_mode(data, path, mode, allow) for mode in VERIFY_MODES}
    _check_modes_agree(results)
    return " ".join(f"{mode}={r.label}" for mode, r in results.items())


def _rlx_mode(data: bytes, path: Path, mode: str, allow: Allowance) -> _ModeResult:
    """Open with one verify mode, then use, compile and run; stop at the first RlxError."""
    result = _ModeResult("open")
    try:
        if data.startswith(crypto.ENC_MAGIC):
            file = read_rlx(path, password=seeds.PASSWORD, verify=mode, kdf_limits=KDF_LIMITS)
        elif mode == "lazy":  # one mode goes through the file and its memory map
            file = read_rlx(path, verify=mode)
        else:
            file = parse_rlx(data, verify=mode)
        result.stage = "use"
        graph = file.into_runtime_graph()
        file.check_integrity(TABLE)  # what any use of the weight table checks first (a
        # duplex file's table is not what its graph runs on)
        _compile_and_run(graph, result, allow)
    except RlxError as err:
        result.error = err
    return result


def _run_rlxp(data: bytes, path: Path, allow: Allowance) -> str:
    """A package opened in each verify mode (from its file: packages are mapped), used,
    compiled and run; the modes must agree as for `.rlx`."""
    results = {}
    for mode in VERIFY_MODES:
        result = _ModeResult("open")
        try:
            file = read_rlxp(path, verify=mode)
            result.stage = "use"
            _compile_and_run(file.into_runtime_graph(), result, allow)
        except RlxError as err:
            result.error = err
        results[mode] = result
    _check_modes_agree(results)
    return " ".join(f"{mode}={r.label}" for mode, r in results.items())


def _compile_and_run(graph: Graph, result: _ModeResult, allow: Allowance) -> None:
    """Compile `graph` and run it on `feeds_for` its inputs, recording the stage reached."""
    result.stage = "compile"
    compiled = Session().compile(graph)
    result.stage = "feed"
    feeds = feeds_for(compiled.input_shapes)
    declared = declared_bytes(graph) + sum(a.nbytes for a in (feeds or {}).values())
    if feeds is None or declared > MAX_RUN_BYTES:
        result.stage = "too-big-to-run"
        return
    result.stage = "run"
    if is_dynamic(graph):
        allow.declared = MAX_RUN_BYTES
        start = time.process_time()
        try:
            with deadline(DYNAMIC_RUN_SECONDS, RunInterrupted):
                result.outputs = compiled.run(feeds)
        except RunInterrupted:
            allow.excused_seconds += time.process_time() - start
            result.stage = "run-interrupted"
            return
    else:
        allow.declared = max(allow.declared, declared)
        result.outputs = compiled.run(feeds)
    result.stage = "ran"


def is_dynamic(graph: Graph) -> bool:
    """True when some value's size or some trip count is only known when running."""
    for node in graph.nodes():
        shapes = node.shape if isinstance(node.shape, tuple) else (node.shape,)
        if not all(isinstance(d, int) for s in shapes for d in s.dims) or any(
                type(node.op).__name__ == "Loop" or is_dynamic(sub)
                for sub in node.op.subgraphs()):
            return True
    return False


def _check_modes_agree(results: dict[str, _ModeResult]) -> None:
    """`none` checks what `full` checks but the blob checksums; `lazy` checks them at first
    use. So they fail at the same place on the same error, except that a checksum failure
    shows in `full` at open and in `lazy` at use; and when `full` opens, all three agree."""
    full, lazy, none = results["full"], results["lazy"], results["none"]
    if none.stage == "open":
        if {type(full.error), type(lazy.error)} != {type(none.error)} or full.stage != "open" \
                or lazy.stage != "open":
            raise Inconsistent(f"open fails differently: full={full.label} "
                               f"lazy={lazy.label} none={none.label}")
        return
    if lazy.stage == "open":
        raise Inconsistent(f"lazy open failed where none opened: {lazy.label}")
    if isinstance(full.error, IntegrityError) and full.stage == "open":
        if not (lazy.stage == "use" and isinstance(lazy.error, IntegrityError)):
            raise Inconsistent(f"full found a bad checksum, lazy at first use did not: "
                               f"{lazy.label}")
        return
    if full.stage == "open" or isinstance(lazy.error, IntegrityError):
        raise Inconsistent(f"full={full.label} lazy={lazy.label}")
    for other in (lazy, none):
        if (other.stage, type(other.error)) != (full.stage, type(full.error)) \
                or not _same_arrays(other.outputs, full.outputs):
            raise Inconsistent(f"modes end differently: full={full.label} other={other.label}")


def _same_arrays(a: list[np.ndarray] | None, b: list[np.ndarray] | None) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(map(np.asarray, a), map(np.asarray, b)))


def feeds_for(shapes: dict[str, Shape]) -> dict[str, np.ndarray] | None:
    """Deterministic feeds of the declared shapes (symbolic dims = 2), small valid values
    (integers in [0, 3): valid indices for the seeds' tables); None when too large."""
    feeds = {}
    for name, shape in shapes.items():
        dims = tuple(d if isinstance(d, int) else 2 for d in shape.dims)
        if math.prod(max(d, 1) for d in dims) > MAX_FEED_ELEMENTS:
            return None  # also what no array can be, like [0, 2**64]
        count = math.prod(dims)
        values = np.arange(count) % 3
        dtype = shape.dtype.numpy
        if dtype.kind == "f":
            values = values - 1.25
        feeds[name] = values.astype(dtype).reshape(dims)
    return feeds


def declared_bytes(graph: Graph) -> int:
    """Bytes of every value with a static shape, subgraphs included (each counted once)."""
    total = 0
    for node in graph.nodes():
        shapes = node.shape if isinstance(node.shape, tuple) else (node.shape,)
        total += sum(s.nbytes for s in shapes if s.is_static)
        for sub in node.op.subgraphs():
            total += declared_bytes(sub)
    return total


# -- ONNX models ---------------------------------------------------------------------------
def _run_onnx(data: bytes, path: Path, allow: Allowance) -> str:
    """Import (from the file, so external data resolves against its folder), bake with the
    exact profile, compile and run."""
    result = _ModeResult("import")
    try:
        graph, bindings = import_onnx(path)
        result.stage = "bake"
        file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
        _compile_and_run(file.into_runtime_graph(), result, allow)
    except RlxError as err:
        result.error = err
    return result.label


# -- weight files --------------------------------------------------------------------------
def _touch(array: np.ndarray) -> None:
    """Read the first and last element: a view past its buffer would fault here."""
    flat = array.reshape(-1)
    if flat.size:
        flat[[0, -1]].tobytes()


def _weights_runner(policies: tuple[str, ...]) -> Callable[[bytes, Path, Allowance], str]:
    def run(data: bytes, path: Path, allow: Allowance) -> str:
        labels = []
        for policy in policies:
            try:
                bundle = load_weights(path, policy)
            except RlxError as err:
                labels.append(f"{policy}={where(err)}")
                continue
            for array in bundle.tensors.values():
                _touch(array)
            for packed in bundle.packed:
                _touch(packed.data)
            labels.append(f"{policy}=ok")
        return " ".join(labels)

    return run


def _run_mlx(data: bytes, path: Path, allow: Allowance) -> str:
    """An MLX folder case: the STORE zip's two files written into a fresh folder, which is
    loaded as a folder (packed rows under NO-GO, decoded under GO)."""
    import shutil

    folder = path.with_suffix(".mlx")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        members = seeds.zip_members(data)
    except Exception:  # noqa: BLE001  (not a folder: nothing rlx reads)
        return "no-folder"
    for name in ("config.json", "model.safetensors"):
        if name in members:
            (folder / name).write_bytes(members[name])
    labels = []
    for policy in ("f32", "packed"):
        try:
            bundle = load_weights(folder, policy)
        except RlxError as err:
            labels.append(f"{policy}={where(err)}")
            continue
        for value in bundle.tensors.values():
            _touch(materialize(value))
        for packed in bundle.packed:
            _touch(packed.data)
        labels.append(f"{policy}=ok")
    return " ".join(labels)


def _all_artifacts() -> dict[str, bytes]:
    return {**seeds.artifacts(), **seeds.encrypted_artifacts()}


TARGETS: dict[str, Target] = {t.name: t for t in [
    # reading validates, use decodes packed rows (up to 16 f32 bytes per TQ2_0 byte)
    Target("rlx", ".bin", 32, _run_rlx, mutate.rlx_case, _all_artifacts),
    # warm/cold tiers inflate into buffers the rows declare (bounded by the row's raw_len)
    Target("rlxp", ".rlxp", 64, _run_rlxp, mutate.rlxp_case, seeds.rlxp_packages),
    # protobuf parses in C (bounded by the RLIMIT_AS backstop); initializers become arrays,
    # each node IR objects: ~700 bytes per node, 36x the densest model seen (124 KB holding
    # 6,340 nodes of 20 bytes each)
    Target("onnx", ".onnx", 64, _run_onnx, mutate.onnx_case, seeds.onnx_models,
           seeds.prepare_onnx_folder),
    Target("safetensors", ".safetensors", 8, _weights_runner(("f32",)), mutate.safetensors_case,
           seeds.safetensors_files),
    # zip members are inflated into memory: deflate reaches 1032:1 at most
    Target("npz", ".npz", 1100, _weights_runner(("f32",)), mutate.npz_case, seeds.npz_files),
    Target("npy", ".npy", 8, _weights_runner(("f32",)), mutate.npy_case, seeds.npy_files),
    # auto keeps native half tensors (views), f32 widens them: 2 bytes out per byte in
    Target("dduf", ".dduf", 8, _weights_runner(("auto", "f32")), mutate.dduf_case,
           seeds.dduf_files),
    # GO decodes packed codes to f32: 32 bytes per code byte at 1 bit, plus temporaries
    Target("mlx", ".zip", 64, _run_mlx, mutate.mlx_case, seeds.mlx_folders),
    # f32 decodes packs: 20 f32 bytes per packed byte at most (IQ1_S), plus temporaries
    Target("gguf", ".gguf", 64, _weights_runner(("f32", "packed")), mutate.gguf_case,
           seeds.gguf_files),
]}


# -- the corpus ----------------------------------------------------------------------------
CORPUS = Path(__file__).resolve().parent / "corpus"


def case_name(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16] + ".bin"


def corpus_files(target: str) -> list[Path]:
    """The kept cases of one target, in a stable order."""
    return sorted((CORPUS / target).glob("*.bin"))


def pool_for(target: Target) -> list[bytes]:
    """What mutation starts from: the seeds and the corpus."""
    return [*target.seeds().values(), *(p.read_bytes() for p in corpus_files(target.name))]


# -- known open findings -------------------------------------------------------------------
# Contract violations that fuzzing found in code owned elsewhere and that are not fixed yet,
# as {(target, regex on the outcome signature): reason}. A matching case is an expected
# failure; test_corpus.py fails once an entry matches no corpus case any more (strict).
# Empty: the ONNX importer's findings of the first runs were fixed by its owner
# (docs/reliability.md, "Findings").
KNOWN_OPEN: dict[tuple[str, str], str] = {}


def known_reason(outcome: Outcome) -> str | None:
    for (target, pattern), reason in KNOWN_OPEN.items():
        if outcome.target == target and re.search(pattern, outcome.signature):
            return f"known open: {reason}"
    return None
