"""Print the README's size-profile table: every MODELS.md model baked exact and size
(calibrated), with sizes, ratios, the weights kept f32 and the cosines.

    .venv/bin/python scripts/size_profile_table.py [MODEL ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.baking.size_real import measure  # noqa: E402
from tests.real_models import MODELS  # noqa: E402

if __name__ == "__main__":
    print("| model | exact bytes | size bytes | ratio | linear share | kept f32 by the guard | "
          "cosine (calibration) | cosine (held-out) |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for name in sys.argv[1:] or MODELS:
        r = measure(name)
        kept = ", ".join(r.kept) if r.kept else "none"
        print(f"| {name} | {r.exact_bytes:,} | {r.size_bytes:,} | {r.ratio:.3f} | "
              f"{r.linear_share:.1%} | {kept} | {r.calibration_cosine:.6f} | "
              f"{r.held_out_cosine:.6f} |", flush=True)
