"""Ray integration (the `rlx[ray]` extra): serve a baked model over HTTP with Ray Serve,
map Ray Data batches through it.

    app = rlx.ray.deployment("model.rlx", num_replicas=2)   # serve.run(app)
    ds.map_batches(rlx.ray.Predictor, fn_constructor_kwargs={"path": "model.rlx"},
                   concurrency=2, batch_size=64)

`import rlx.ray` needs no Ray; `deployment` without Ray installed is a one-line
`ServeError` naming `pip install 'rlx[ray]'`. Sits above the engines, beside the CLI.
"""

from rlx._lazy import lazy_exports

_LAZY = {
    "deployment": "rlx.ray.serve",
    "Predictor": "rlx.ray.data",
}
__all__ = ["Predictor", "deployment"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
