"""Lazy packages (rlx._lazy): every exported name resolves, unknown names raise
AttributeError, and loading or reading a model does not import what it does not use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

LAZY_PACKAGES = ["rlx", "rlx.codecs", "rlx.ir", "rlx.passes", "rlx.weights"]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_export_resolves(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) - {"__version__"} <= set(dir(module))


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_unknown_names_raise_attribute_error(package):
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        getattr(importlib.import_module(package), "nope")  # noqa: B009  (the lookup is the test)


def _imported_after(code: str) -> set[str]:
    """Module names a fresh interpreter has imported after running `code`."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(*sys.modules)"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


HEAVY = {"onnx", "gguf", "rlx.baking.pipeline", "rlx.weights.load", "rlx.passes.constant_folding",
         "rlx.onnx"}


def test_import_rlx_imports_nothing_heavy():
    loaded = _imported_after("import rlx")
    # typing (with re, functools, ...: 1.3 MB anonymous) only for a name that needs it
    assert not loaded & (HEAVY | {"numpy", "rlx.runtime", "rlx.artifact", "typing", "re"})


def test_rlx_ir_imports_the_op_families_only_for_an_op_name():
    """rlx.ir's own names (dtypes, shapes) load alone; an op's name loads the families,
    whose `__all__` lists are where rlx.ir finds it."""
    assert not {m for m in _imported_after("import rlx.ir\nrlx.ir.DType, rlx.ir.Shape")
                if m.startswith("rlx.ir.ops")}
    assert "rlx.ir.ops.nn" in _imported_after("from rlx.ir import Conv")


def test_reading_and_running_does_not_import_the_bake_or_onnx():
    loaded = _imported_after("from rlx import read_rlx, Session")
    assert {"rlx.artifact.reader", "rlx.runtime.session"} <= loaded
    assert not loaded & HEAVY


def test_every_name_means_one_thing():
    """No module shares its name with what its package exports: `import rlx.baking` keeps
    `rlx.bake` the function and gives the package's own names (issue 17)."""
    code = ("import rlx.baking, rlx.passes.constant_folding, rlx.artifact\n"
            "print(callable(rlx.bake), rlx.baking.BakeOptions.__name__,"
            " callable(rlx.passes.fold_constants), rlx.relayout is rlx.artifact.relayout)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["True", "BakeOptions", "True", "True"]


_READ_AND_COMPILE = """
import dataclasses, sys
import numpy
counts = {"classes": 0}
standard = dataclasses._process_class
def counted(*args, **kwargs):
    counts["classes"] += 1
    return standard(*args, **kwargs)
dataclasses._process_class = counted
before = set(sys.modules)
import rlx
file = rlx.read_rlx(path)
compiled = rlx.Session().compile(file.into_runtime_graph())
compiled.run({n: numpy.zeros([d if isinstance(d, int) else 1 for d in s.dims], s.dtype.numpy)
              for n, s in compiled.input_shapes.items()})
print(counts["classes"], *sorted(set(sys.modules) - before))
"""


def test_reading_and_compiling_builds_few_classes_and_no_bake_modules(tmp_path):
    """Deterministic stand-ins for the time to a compiled model: op types are records
    (`rlx.record`), not standard dataclasses (each one ~6 `exec` calls), and the read
    -> compile -> run path imports no optimiser, pass, frontend or weight-loader module."""
    from rlx import BakeOptions, BakeProfile, bake, write_rlx
    from rlx.models import mlp_graph, mlp_weights

    path = tmp_path / "mlp.rlx"
    file, _ = bake(mlp_graph(), mlp_weights(), BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(path, file)
    code = _READ_AND_COMPILE.replace("rlx.read_rlx(path)", f"rlx.read_rlx({str(path)!r})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    classes, modules = int(out[0]), set(out[1:])
    # one: rlx.record's template; none for the ~80 ops, the artifact, codec and safe-reading
    # records (they were 17 standard dataclasses, ~8 ms)
    assert classes <= 1, classes
    assert "rlx.runtime.session" in modules and "rlx.artifact.reader" in modules
    banned = ("rlx.baking", "rlx.passes", "rlx.frontends", "rlx.weights", "onnx", "gguf",
              "rlx.runtime.profile", "rlx.artifact.writer",
              "subprocess", "shutil", "tempfile",  # ctypes.util brought these (~15 ms)
              # needed only for bf16 / float8 values, signatures, SIGBUS repairs, typing
              "ml_dtypes", "pathlib", "ctypes", "numpy.typing",
              # logging (~10 ms with the regular expressions it compiles) only once a
              # record can be seen (rlx.logs); base64 only for graph JSON payloads; json
              # (~2.5 ms of regular expressions): headers go to its C scanner directly
              "logging", "traceback", "base64", "json",
              # the op families (and their kernels) the graph has no op of; a file's
              # self-test, which it has not; threading (the locks are `_thread`'s)
              "rlx.ir.ops.control", "rlx.ir.ops.quant", "rlx.ir.ops.reduce",
              "rlx.kernels.control", "rlx.kernels.integer", "rlx.kernels.qlinear",
              "rlx.kernels.reduce",
              "rlx.artifact.self_test", "threading",
              # the codecs of encodings the file does not use
              "rlx.codecs.mlx", "rlx.codecs.q8_0")
    assert not {m for m in modules if m.startswith(banned)}, modules
    # rlx.load on the numpy engine: nor the warm load, which only onnxruntime uses
    loaded = _imported_after(f"import rlx\nrlx.load({str(path)!r}, engine='numpy')")
    assert not loaded & {"logging", "pathlib", "hashlib", "json", "rlx.engines.warm"}, loaded


def test_a_warm_onnxruntime_load_imports_no_numpy_kernel_and_spawns_nothing(tmp_path):
    """Time to first result on other engines: with onnxruntime's saved model warm, a load
    imports neither the numpy kernels nor the ONNX exporter, and runs no subprocess
    (`platform.processor()` ran `uname -p`; `ctypes.util` imported subprocess)."""
    from rlx import BakeOptions, BakeProfile, bake, write_rlx
    from rlx.models import mlp_graph, mlp_weights

    path = tmp_path / "mlp.rlx"
    file, _ = bake(mlp_graph(), mlp_weights(), BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(path, file)
    code = (f"import rlx\nmodel = rlx.load({str(path)!r}, engine='onnxruntime', "
            f"cache_dir={str(tmp_path / 'cache')!r})\n"
            "model.run({i.name: __import__('numpy').zeros([1 if isinstance(d, str) else d "
            "for d in i.shape], i.dtype) for i in model.inputs})")
    _imported_after(code)  # the first load saves onnxruntime's optimised model
    loaded = _imported_after(code)
    assert not {m for m in loaded if m.startswith(("rlx.kernels", "rlx.runtime.session",
                                                   "rlx.frontends", "onnx.", "subprocess"))}
