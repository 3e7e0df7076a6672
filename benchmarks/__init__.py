"""Benchmarks of rlx against onnxruntime, onnx.reference and the gguf quantisers (not shipped
with the package; run with `make bench`)."""
