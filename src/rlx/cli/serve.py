"""`rlx-bake serve MODEL.rlx`: the model over HTTP with Ray Serve (`rlx.ray`), on this
machine, until Ctrl-C (or SIGTERM)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rlx.cli.inputs import non_negative_float, positive_int
from rlx.cli.sign import add_trusted_key_option, trusted_keys
from rlx.cli.ui import Outcome, Ui
from rlx.engines.registry import ENGINES
from rlx.errors import ServeError

__all__ = ["add_commands"]

_FORMATTER = argparse.RawDescriptionHelpFormatter
_EXAMPLES = """examples:
  rlx-bake serve model.rlx                       http://127.0.0.1:8000, one replica
  rlx-bake serve model.rlx --port 9000 --replicas 2 --engine onnxruntime

  curl -s localhost:8000/health
  curl -s localhost:8000/predict -H 'Content-Type: application/json' \\
       -d '{"inputs": {"x": [[0.1, 0.2, 0.3]]}}'
  python -c 'import numpy as np; np.savez("x.npz", x=np.ones((1, 3), np.float32))'
  curl -s localhost:8000/predict -H 'Content-Type: application/octet-stream' \\
       --data-binary @x.npz -o outputs.npz

errors come back as JSON {"error": {"type", "message", "status"}}: 400 for feeds the model
refuses (with rlx's message), 415 for another content type, 500 otherwise."""


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common], formatter_class=_FORMATTER,
                       help="serve a .rlx file over HTTP with Ray Serve (needs rlx[ray])",
                       description="Start a local Ray cluster and serve the model: POST "
                                   "/predict takes JSON {\"inputs\": {name: nested lists}} or "
                                   "an .npz archive (Content-Type: application/octet-stream) "
                                   "and answers in the same format; GET /health describes "
                                   "the model. Requests arriving together run as one batch "
                                   "when the model has a symbolic batch dim. Runs until "
                                   "Ctrl-C.",
                       epilog=_EXAMPLES)
    p.add_argument("file", help="a .rlx file or .rlxp package")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 for every one)")
    p.add_argument("--port", type=positive_int, default=8000, help="port (default 8000)")
    p.add_argument("--replicas", type=positive_int, default=1,
                   help="model replicas, each a process mapping the same file (default 1)")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="what runs the model in each replica (default auto)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="intra-op threads per replica, and the CPUs it reserves (default 1)")
    p.add_argument("--max-batch-size", type=positive_int, default=16,
                   help="most requests run as one model call (default 16)")
    p.add_argument("--batch-wait-ms", type=non_negative_float, default=5.0,
                   help="how long a batch waits for more requests (default 5 ms)")
    add_trusted_key_option(p)
    p.set_defaults(run=_serve)


def _serve(args, ui: Ui) -> Outcome:
    from rlx.ray.codec import ROUTES
    from rlx.ray.serve import deployment, serve_locally, stop_serving, wait_for_stop

    cpus = len(os.sched_getaffinity(0))
    if args.replicas * args.threads > cpus:
        raise ServeError(f"--replicas {args.replicas} x --threads {args.threads} reserve "
                         f"{args.replicas * args.threads} CPUs; this machine has {cpus}")
    app = deployment(args.file, engine=args.engine, threads=args.threads,
                     max_batch_size=args.max_batch_size,
                     batch_wait_timeout_s=args.batch_wait_ms / 1e3,
                     num_replicas=args.replicas, trusted_keys=trusted_keys(args))
    with ui.step(f"starting {args.replicas} replica(s) of {args.file}"):
        url = serve_locally(app, host=args.host, port=args.port, verbose=args.verbose)
    data: dict[str, Any] = {"command": "serve", "file": args.file, "url": url,
                            "routes": [f"{method} {url}{path}" for path, method in
                                       ROUTES.items()],
                            "replicas": args.replicas, "engine": args.engine}
    if not (ui.as_json or ui.quiet):
        ui.line(f"serving {args.file} at {url} ({args.replicas} replica(s), engine "
                f"{args.engine}); Ctrl-C stops")
        for line in data["routes"]:
            ui.line(f"  {line}")
        sys.stdout.flush()
    try:
        wait_for_stop()
    finally:
        stop_serving()
    return Outcome({**data, "stopped": True}, lambda d, u: u.line("stopped"))
