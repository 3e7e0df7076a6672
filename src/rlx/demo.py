"""`rlx-bake demo`: the reference's MNIST example, self-contained and on real data.

Trains a 64-256-10 MLP with numpy (Adam, softmax cross-entropy) on the handwritten digits
vendored in `rlx/data` (1,797 8x8 images), ternarises the first layer with the reference's
rule (plain sign, no scale: the fine-tuned second layer absorbs the scale), fine-tunes the
rest with it frozen, then bakes the model with every profile and memory mode, plus once
encrypted, writes each file, reloads it and measures accuracy on the held-out images.

The first layer is 64 x 256 so its 16,384 weights fill whole TQ2_0 blocks of 256; the
second (256 x 10) fills Q8_0 blocks of 32 under the size profile.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from rlx import BakeOptions, BakeProfile, MemoryMode, bake
from rlx.artifact import write_artifact
from rlx.artifact.crypto import KdfParams
from rlx.engines import load
from rlx.models import mlp_graph, ternarize

__all__ = ["DEMO_KDF", "DemoResult", "DemoRow", "Digits", "load_digits", "run_demo"]

SIZES = (64, 256, 10)
TEST_FRACTION = 0.2
BATCH = 32
CALIBRATION_IMAGES = 64  # what the size profile's accuracy guard measures on
DEMO_PASSWORD = "rlx-demo"
# A deliberately cheap Argon2id cost (1 MiB, one pass) so the demo stays fast; files baked
# with `rlx-bake bake --password-...` use the default (19 MiB, two passes).
DEMO_KDF = KdfParams(m_cost=1024, t_cost=1, p_cost=1)

Weights = dict[str, np.ndarray]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Digits:
    x_train: np.ndarray  # float32 [n, 64], pixels scaled to 0..1
    y_train: np.ndarray  # int64 [n]
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits(seed: int = 0) -> Digits:
    """The vendored digits, shuffled with `seed` and split 80/20 into train and test."""
    source = resources.files("rlx") / "data" / "digits.csv.gz"
    with source.open("rb") as raw, gzip.open(raw) as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.float32)
    x, y = table[:, :-1] / np.float32(16), table[:, -1].astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = round(len(y) * TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return Digits(x[train], y[train], x[test], y[test])


# --- training (numpy) ---------------------------------------------------------------------


def _forward(w: Weights, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hidden activations, logits)."""
    h = np.maximum(x @ w["w1"] + w["b1"], 0)
    return h, h @ w["w2"] + w["b2"]


def _gradients(w: Weights, x: np.ndarray, y: np.ndarray) -> Weights:
    """Gradients of the mean softmax cross-entropy."""
    h, logits = _forward(w, x)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    d = p / len(y)
    dh = (d @ w["w2"].T) * (h > 0)
    return {"w1": x.T @ dh, "b1": dh.sum(0), "w2": h.T @ d, "b2": d.sum(0)}


def _train(w: Weights, digits: Digits, epochs: int, lr: float, rng: np.random.Generator,
           frozen: frozenset[str] = frozenset()) -> Weights:
    """Adam on mini-batches; `frozen` weights keep their values (the ternary layer)."""
    w = {k: v.copy() for k, v in w.items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v2 = {k: np.zeros_like(v) for k, v in w.items()}
    beta1, beta2, step = 0.9, 0.999, 0
    for _ in range(epochs):
        order = rng.permutation(len(digits.y_train))
        for start in range(0, len(order), BATCH):
            batch = order[start:start + BATCH]
            grads = _gradients(w, digits.x_train[batch], digits.y_train[batch])
            step += 1
            for k, g in grads.items():
                if k in frozen:
                    continue
                m[k] = beta1 * m[k] + (1 - beta1) * g
                v2[k] = beta2 * v2[k] + (1 - beta2) * g * g
                m_hat, v_hat = m[k] / (1 - beta1 ** step), v2[k] / (1 - beta2 ** step)
                w[k] -= (lr * m_hat / (np.sqrt(v_hat) + 1e-8)).astype(np.float32)
    return w


def _init(rng: np.random.Generator) -> Weights:
    """He initialisation, zero biases."""
    n_in, hidden, n_out = SIZES
    return {
        "w1": (rng.standard_normal((n_in, hidden)) * np.sqrt(2 / n_in)).astype(np.float32),
        "b1": np.zeros(hidden, np.float32),
        "w2": (rng.standard_normal((hidden, n_out)) * np.sqrt(2 / hidden)).astype(np.float32),
        "b2": np.zeros(n_out, np.float32),
    }


def _accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(logits, axis=1) == labels))


# --- bake, reload, score ------------------------------------------------------------------


@dataclass(frozen=True)
class DemoRow:
    profile: str
    memory: str
    encrypted: bool
    path: str
    file_bytes: int
    ratio: float  # raw float32 weight bytes / file size
    load_ms: float  # rlx.load on the numpy engine (read, materialise, compile)
    accuracy: float  # on the held-out test images


@dataclass(frozen=True)
class DemoResult:
    out_dir: str
    train_size: int
    test_size: int
    float_accuracy: float  # the float32 MLP before ternarisation
    ternary_accuracy: float  # after ternarising w1 and fine-tuning, in numpy, before baking
    raw_f32_bytes: int
    rows: list[DemoRow]
    seconds: float


def _bake_one(path: Path, weights: Weights, digits: Digits, profile: BakeProfile,
              memory: MemoryMode, raw: int, password: str | None = None) -> DemoRow:
    # the lossy encodings are checked on training images (the scores are on test ones)
    calibration = [{"x": digits.x_train[:CALIBRATION_IMAGES]}]
    file, _ = bake(mlp_graph("batch", *SIZES, name="digits_mlp"), weights,
                   BakeOptions.from_profile(profile).replace(memory=memory,
                                                             calibration=calibration))
    write_artifact(path, file, password=password, kdf=DEMO_KDF if password else None)
    start = time.perf_counter()
    model = load(path, engine="numpy", password=password)
    load_ms = (time.perf_counter() - start) * 1e3
    (logits,) = model.run({"x": digits.x_test})
    size = path.stat().st_size
    return DemoRow(profile.value, memory.value, password is not None, str(path), size,
                   raw / size, load_ms, _accuracy(logits, digits.y_test))


def run_demo(out_dir: str | Path = "demo-out", seed: int = 0,
             progress: Progress = lambda _: None) -> DemoResult:
    """Train, bake every profile x memory mode (and one encrypted file), reload, score."""
    start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    digits = load_digits(seed)
    progress("training the float32 MLP")
    dense = _train(_init(rng), digits, epochs=30, lr=3e-3, rng=rng)
    progress("ternarising w1 and fine-tuning the rest")
    ternary = _train(dict(dense, w1=ternarize(dense["w1"])), digits, epochs=30, lr=3e-3,
                     rng=rng, frozen=frozenset({"w1"}))
    raw = sum(v.nbytes for v in ternary.values())
    rows = []
    for profile in BakeProfile:
        for memory in MemoryMode:
            progress(f"baking {profile.value} / {memory.value}")
            rows.append(_bake_one(out / f"digits-{profile.value}-{memory.value}.rlx", ternary,
                                  digits, profile, memory, raw))
    progress("baking size / compact, encrypted")
    rows.append(_bake_one(out / "digits-size-compact-encrypted.rlx", ternary, digits,
                          BakeProfile.SIZE, MemoryMode.COMPACT, raw, password=DEMO_PASSWORD))
    return DemoResult(
        str(out), len(digits.y_train), len(digits.y_test),
        _accuracy(_forward(dense, digits.x_test)[1], digits.y_test),
        _accuracy(_forward(ternary, digits.x_test)[1], digits.y_test),
        raw, rows, time.perf_counter() - start)
