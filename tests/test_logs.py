"""rlx.logs: records reach `logging` as a `logging.Logger`'s would, once logging is in use."""

from __future__ import annotations

import logging
import subprocess
import sys

from rlx.logs import Logger


def test_records_name_the_caller_at_every_level(caplog):
    log = Logger("rlx.test")
    with caplog.at_level(logging.DEBUG, logger="rlx.test"):
        log.debug("a %s", "debug")
        log.info("an %s", "info")
        log.warning("a %s", "warning")
    assert [(r.levelname, r.getMessage(), r.name, r.funcName) for r in caplog.records] == [
        (level, text, "rlx.test", "test_records_name_the_caller_at_every_level")
        for level, text in (("DEBUG", "a debug"), ("INFO", "an info"),
                            ("WARNING", "a warning"))]


def test_info_waits_for_logging_and_a_warning_imports_it():
    """Unconfigured, `logging` would drop info but print a warning (its last resort)."""
    code = ("import sys\nfrom rlx.logs import Logger\nlog = Logger('rlx.test')\n"
            "log.info('dropped')\nprint('logging' in sys.modules)\n"
            "log.warning('shown %d', 1)\nprint('logging' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "True"]
    assert out.stderr.strip() == "shown 1"
