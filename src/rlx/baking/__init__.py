"""The bake: options and profiles, the pass pipeline and its report.

This is the optimiser. Reading or running an artifact never imports it (see
`rlx.artifact` for the in-memory artifact and its memory layouts).
"""

from rlx.baking.from_files import BakedFile, WeightsUsed, bake_file, constant_bytes
from rlx.baking.guard import AccuracyReport, OutputAccuracy, TensorAccuracy
from rlx.baking.options import BakeOptions, BakeProfile
from rlx.baking.pipeline import BakeReport, OptimizeStats, bake, bake_bundle

__all__ = ["AccuracyReport", "BakeOptions", "BakeProfile", "BakeReport", "BakedFile",
           "OutputAccuracy", "OptimizeStats", "TensorAccuracy", "WeightsUsed", "bake",
           "bake_bundle", "bake_file", "constant_bytes"]
