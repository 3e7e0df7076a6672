"""If nodes whose branches return values of different ranks, settled by what follows.

ONNX lets an If's branches differ in rank; an rlx value has one rank. Exporters write such
Ifs for shape-dependent code such as PyTorch's `x.squeeze(-1)` (an If on `dim == 1`:
Squeeze, else Identity). With fixed input sizes the condition folds; with symbolic ones
both branches stay, and usually only one rank fits the ops after the If (an LSTM takes
rank 3, say): the model fails in ONNX Runtime whenever the other branch is taken.

`BranchRanks.settle` converts a graph body once per rank and keeps the one the rest of the
body (and the graphs around it) accepts; the If's other branch becomes `Fail` nodes, so
taking it at run time raises a clear error, never runs on a wrong shape. A choice with
more misfits (branches made unreachable, graph outputs off their declared rank) loses;
when both ranks fit equally, the difference is left to the enclosing graph, and at the
top level it is an import error: the rank then depends on input sizes, which must be
fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rlx.errors import ModelImportError

__all__ = ["BranchRankError", "BranchRanks"]

T = TypeVar("T")

BRANCHES = ("then", "else")

MAX_TRIES = 256
"""Branch choices tried per import, at most: each converts a graph body again, and Ifs
that only the graph's outputs tell apart multiply the tries (2 per If)."""


class BranchRankError(ModelImportError):
    """An If (`label`) whose branches return an output with different ranks, not yet
    settled: the graph body around it is converted once per branch to settle it."""

    def __init__(self, label: str, message: str):
        super().__init__(message)
        self.label = label


class BranchRanks:
    """Per import: which branch's ranks each rank-differing If keeps (by node label), and
    a count of misfits so far, to compare choices: branches made unreachable (`Fail`) and
    graph outputs whose declared rank is not met."""

    def __init__(self) -> None:
        self.kept: dict[str, int] = {}
        self.misfits = 0
        self.tries = 0

    def settle(self, convert: Callable[[], T], outermost: bool = False) -> T:
        """`convert()`, converting again per branch for each rank-differing If it meets:
        the branch with the fewest misfits wins. A tie, or an If inside left unsettled, is
        left to the enclosing graph; in the `outermost` one that is an import error."""
        try:
            return convert()
        except BranchRankError as err:
            label, first = err.label, err
        fitting: list[tuple[int, T, dict[str, int]]] = []
        failure: ModelImportError | None = None
        outer = dict(self.kept)
        for branch in range(len(BRANCHES)):
            self.tries += 1
            if self.tries > MAX_TRIES:
                raise ModelImportError(f"{first}; settling such Ifs takes over {MAX_TRIES} "
                                       "conversions") from None
            self.kept = {**outer, label: branch}
            before = self.misfits
            try:
                result = self.settle(convert, outermost)
            except BranchRankError as err:
                if not outermost:
                    self.kept = outer
                    raise  # another If to settle around this graph first
                failure = err
                continue
            except ModelImportError as err:
                if self.tries > MAX_TRIES:
                    raise
                failure = err
                continue
            fitting.append((self.misfits - before, result, self.kept))
        self.kept = outer
        if not fitting:
            assert failure is not None
            raise ModelImportError(f"{first}; with either branch's ranks the graph "
                                   f"fails: {failure}") from None
        fitting.sort(key=lambda f: f[0])
        if len(fitting) == 2 and fitting[0][0] == fitting[1][0]:
            raise first  # both ranks fit equally here: the enclosing graph may settle it
        _, result, self.kept = fitting[0]
        return result
