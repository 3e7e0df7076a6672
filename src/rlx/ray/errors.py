"""`RequestError`: a request the server refuses, with the HTTP status it answers."""

from __future__ import annotations

from rlx.errors import InputError

__all__ = ["RequestError"]


class RequestError(InputError):
    """A request the server cannot turn into feeds; `status` is its HTTP status."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status
