"""Status codes and the exception of failed calls.

``StatusCode`` is turbokv's own enum (its values are the google.rpc.Code numbers the server
sends, so ``StatusCode(int)`` converts a per-block ``code`` from the wire); no grpc type
crosses the client's API.
"""
from __future__ import annotations

import enum


class StatusCode(enum.IntEnum):
    """Outcome of a call or of one block (values = google.rpc.Code, the gRPC status codes).

    The codes turbokv uses and what they mean here:

    * ``OK``: done (for a put: stored and durable per the server's ``--durability``).
    * ``INVALID_ARGUMENT``: bad descriptor, shape, dtype, hash length, layer range or
      malformed packed block (the caller's mistake; retrying does not help).
    * ``NOT_FOUND``: unknown namespace (a missing *block* is ``None`` in results, never this).
    * ``RESOURCE_EXHAUSTED``: store full with nothing evictable, or a request too large.
    * ``UNAVAILABLE``: server unreachable or shutting down (after the client's retries).
    * ``DEADLINE_EXCEEDED``: the call's deadline (``timeout``) passed.
    * ``DATA_LOSS``: corruption detected, or a response stream that does not reassemble;
      wrong data is never returned.
    * ``CANCELLED``: the call was cancelled (e.g. the client was closed during it).
    * ``INTERNAL``: a server bug or a CUDA failure.
    """
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @classmethod
    def from_int(cls, value: int) -> StatusCode:
        """The code with this number; UNKNOWN for a number outside the enum."""
        try:
            return cls(int(value))
        except ValueError:
            return cls.UNKNOWN


class TurboKVError(Exception):
    """A call failed (after retries, for UNAVAILABLE).

    Attributes:
      code: a :class:`StatusCode` (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED,
        UNAVAILABLE, DEADLINE_EXCEEDED, DATA_LOSS, INTERNAL, ...).
      details: the server's (or the client's) message.
    """

    def __init__(self, code: StatusCode, details: str):
        code = StatusCode.from_int(code)
        super().__init__("%s: %s" % (code.name, details))
        self.code = code
        self.details = details

    def __reduce__(self):  # picklable (futures, multiprocessing)
        return (type(self), (int(self.code), self.details))


def code_from_int(value: int) -> StatusCode:
    """The :class:`StatusCode` whose number is ``value`` (UNKNOWN when out of range)."""
    return StatusCode.from_int(value)
