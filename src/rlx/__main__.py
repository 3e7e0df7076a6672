"""`python -m rlx` is the `rlx-bake` command."""

from rlx.cli import main

raise SystemExit(main())
