"""The exception raised for failed RPCs."""
from __future__ import annotations

import grpc


class TurboKVError(Exception):
    """An RPC failed (after retries, for UNAVAILABLE).

    Attributes:
      code: the ``grpc.StatusCode`` (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED,
        UNAVAILABLE, DEADLINE_EXCEEDED, DATA_LOSS, INTERNAL, ...).
      details: the server's (or the client's) message.
    """

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__("%s: %s" % (code.name, details))
        self.code = code
        self.details = details


def code_from_int(value: int) -> grpc.StatusCode:
    """The grpc.StatusCode whose numeric value is ``value`` (UNKNOWN when out of range)."""
    for c in grpc.StatusCode:
        if c.value[0] == value:
            return c
    return grpc.StatusCode.UNKNOWN
