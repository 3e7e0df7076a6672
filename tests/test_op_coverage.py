"""Every IR op type is whole: it has a numpy kernel, an ONNX export handler and an ONNX
importer that emits it, or a reasoned exemption below; and the importer names only IR ops
that exist. The exemption tables are exact (an op that gains what it lacked must leave
them), so they stay a true list of the ops that are special."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import rlx.onnx.importer
from rlx.ir.ops import OPS
from rlx.kernels import has_kernel
from rlx.onnx.export_ops import HANDLERS

_SOURCE = "nothing to compute"

NO_KERNEL = {
    "Input": f"a value fed at run time: {_SOURCE}",
    "Param": f"a weight bound before running (by the bake or at compile): {_SOURCE}",
    "Constant": f"bytes stored in the graph, read as they are: {_SOURCE}",
}

NO_EXPORT_HANDLER = {
    "Input": "the exporter writes it as an input of the ONNX graph",
    "Param": "unbound: the exporter refuses it (bake the weights in first)",
    "Constant": "the exporter writes it as an initializer (a weight) on its first use",
    "TupleGet": "names one output of the multi-output ONNX node the exporter wrote",
}

NOT_IMPORTED = {
    "Constant": "the importer makes constants through Graph.constant, not by the class",
    "DecodeWeight": "made by the bake's weight encoding from a weight it packs",
    "DequantGather": "made by the bake's weight encoding from a Gather's packed table",
}

_ONNX_PACKAGE = Path(rlx.onnx.importer.__file__).parent


def _importer_names() -> dict[str, set[str]]:
    """Module -> the names the ONNX importer's modules (all but the exporter's, export*.py)
    import from `rlx.ir` and its modules."""
    names: dict[str, set[str]] = {}
    for path in sorted(_ONNX_PACKAGE.rglob("*.py")):
        if path.name.startswith("export"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rlx.ir"):
                names.setdefault(node.module, set()).update(a.name for a in node.names)
    return names


def _assert_exact(lacking: set[str], exempt: dict[str, str], what: str) -> None:
    unexplained, stale = sorted(lacking - set(exempt)), sorted(set(exempt) - lacking)
    assert not unexplained, f"{unexplained}: no {what} (add one, or an exemption and why)"
    assert not stale, f"{stale}: has its {what}, drop the exemption"


@pytest.mark.parametrize(("what", "exempt", "has"), [
    ("numpy kernel", NO_KERNEL, has_kernel),
    ("ONNX export handler", NO_EXPORT_HANDLER, HANDLERS.__contains__),
], ids=["kernel", "export"])
def test_every_op_has_it_or_a_reasoned_exemption(what, exempt, has):
    _assert_exact({name for name, op_type in OPS.items() if not has(op_type)}, exempt, what)


def test_every_op_is_emitted_by_the_importer_or_made_by_the_bake():
    imported = set().union(*_importer_names().values())
    _assert_exact(set(OPS) - imported, NOT_IMPORTED, "ONNX importer")


def test_the_importer_names_only_ir_names_that_exist():
    for module, names in _importer_names().items():
        source = importlib.import_module(module)
        missing = sorted(n for n in names if not hasattr(source, n))
        assert not missing, f"the importer imports {missing} from {module}, which has none"


def test_every_export_handler_is_for_an_ir_op_type():
    for op_type in HANDLERS:
        assert OPS.get(op_type.__name__) is op_type, f"{op_type} is not in rlx.ir.ops.OPS"


def test_the_exemption_tables_name_existing_ops_and_say_why():
    for table in (NO_KERNEL, NO_EXPORT_HANDLER, NOT_IMPORTED):
        assert set(table) <= set(OPS), sorted(set(table) - set(OPS))
        assert all(reason.strip() for reason in table.values())
