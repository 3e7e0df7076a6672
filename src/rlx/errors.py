"""The exception hierarchy: every error a user can cause is an `RlxError`.

Messages are one line and name the thing at fault (file, node, op, input) and what was
expected. `assert` is kept for rlx's own invariants; an `AssertionError` is a bug.
"""

from __future__ import annotations

__all__ = [
    "RlxError", "GraphError", "ShapeError", "UnsupportedOpError", "InputError", "KernelError",
    "BakeError", "BindingError", "WeightError", "ModelImportError", "ArtifactError",
    "IntegrityError", "EncryptedFileError", "DecryptError", "SignatureError", "SigningKeyError",
    "ServeError", "StreamThreadError", "SelfTestError",
]


class RlxError(Exception):
    """Base of every error rlx raises on purpose."""


class GraphError(RlxError):
    """A graph is malformed: bad node reference, duplicate name, unknown op, cycle."""


class ShapeError(GraphError):
    """Shapes or dtypes of a node's inputs do not fit its op."""


class UnsupportedOpError(RlxError):
    """The model uses ops rlx cannot run; `op_types` lists all of them at once."""

    def __init__(self, op_types: list[str] | tuple[str, ...] | set[str], where: str = "",
                 notes: list[str] | tuple[str, ...] = ()):
        self.op_types = sorted(set(op_types))
        self.notes = list(notes)
        place = f" in {where}" if where else ""
        extra = f" ({'; '.join(self.notes)})" if self.notes else ""
        super().__init__(f"unsupported op type(s){place}: {', '.join(self.op_types)}{extra}")


class InputError(RlxError):
    """Feeds given to `CompiledGraph.run` do not match the graph's inputs."""


class KernelError(RlxError):
    """A kernel failed on the values it was given (names the node)."""


class BakeError(RlxError):
    """The bake pipeline cannot proceed with the given graph, bindings or options."""


class BindingError(BakeError):
    """A weight binding does not fit its `Param` (length, dtype or shape)."""


class WeightError(RlxError):
    """A weight file is missing, of an unknown kind, or inconsistent with itself."""


class ModelImportError(RlxError):
    """A model file (ONNX, graph JSON, bundle) cannot be read into an rlx graph."""


class ArtifactError(RlxError):
    """A `*.rlx` file is unreadable, malformed or refused."""


class IntegrityError(ArtifactError):
    """A checksum does not match: the file was changed after it was written."""


class EncryptedFileError(ArtifactError):
    """The file is encrypted and no password was given."""


class DecryptError(ArtifactError):
    """Decryption failed: wrong password or a corrupt/tampered file."""


class SignatureError(ArtifactError):
    """An artifact's signature is missing, malformed, from an untrusted key, invalid, or does
    not match the artifact's bytes. `reason` says which (one of `SignatureError.REASONS`)."""

    REASONS = ("unsigned", "malformed", "untrusted", "invalid", "mismatch", "changed")

    def __init__(self, message: str, reason: str):
        assert reason in self.REASONS, reason
        super().__init__(message)
        self.reason = reason

    def __reduce__(self):  # pickles (multiprocessing) with its reason
        return type(self), (str(self), self.reason)


class SigningKeyError(RlxError):
    """A signing key cannot be used: missing, unreadable, not Ed25519, the wrong half (a
    private key where a public one is wanted), encrypted without a password given, or a
    wrong password."""


class ExportError(RlxError):
    """A graph cannot be written as ONNX (names the node and what ONNX lacks)."""


class EngineError(RlxError):
    """An engine is unknown, not installed, or cannot run the model (one line, with the fix)."""


class StreamThreadError(RlxError):
    """A stream session (`Model.stream()`) was used from a thread other than the one that
    opened it: its state belongs to one stream; open one per thread from the shared model."""


class ServeError(RlxError):
    """Serving cannot start: Ray is not installed, a replica failed, the port is taken."""


class SelfTestError(RlxError):
    """A file's bundled self-test failed on an engine (an output beyond its stored
    tolerance: names the file, engine, output, error and tolerance), or the file has no
    self-test to run."""
