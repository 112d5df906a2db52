"""What every engine integration does with its configuration dict (vLLM's
``kv_connector_extra_config``, SGLang's ``--hicache-storage-backend-extra-config``): turn it into
the integration's options dataclass, build the connection's ``Security`` from the TLS and token
keys, and open a ``Client`` (one ``HOST:PORT``) or a ``ShardedClient`` (a list or ``dns:``)."""
from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from turbokv.security import Security
from turbokv.sharding import DEFAULT_SEGMENT_BLOCKS
from turbokv.store_client import StoreClient

_SECURITY_KEYS = ("tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name", "token",
                  "token_file")

T = TypeVar("T")


def parse_options(cls: type[T], extra: dict[str, Any], *, prefix: str, unknown_message: str,
                  config_name: str) -> T:
    """``cls(**extra)`` with each value converted to its field's type (bool from bools or
    "1/true/yes/on", int, float, else str). Raises ValueError, each message starting with
    ``prefix``: unknown keys (``unknown_message`` % (sorted unknown keys, the known ones)), no
    "server", or a value that does not convert. Range checks are the caller's."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(extra) - set(fields))
    if unknown:
        raise ValueError(unknown_message % (unknown, ", ".join(sorted(fields))))
    if not extra.get("server"):
        raise ValueError("%s: %s needs \"server\" (HOST:PORT[,HOST:PORT...] or dns:///NAME:PORT)"
                         % (prefix, config_name))
    kwargs: dict[str, Any] = {}
    for k, v in extra.items():
        typ = fields[k].type
        try:
            if typ in ("bool", bool):
                kwargs[k] = v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes",
                                                                             "on")
            elif typ in ("int", int):
                kwargs[k] = int(v)
            elif typ in ("float", float):
                kwargs[k] = float(v)
            else:
                kwargs[k] = str(v)
        except (TypeError, ValueError) as e:
            raise ValueError("%s: %s=%r: %s" % (prefix, k, v, e)) from None
    return cls(**kwargs)


def security_of(opts: Any) -> Security:
    """The connection's TLS and token settings from ``opts``' tls, tls_ca, tls_cert, tls_key,
    tls_server_name, token and token_file (the ones set; else the environment's)."""
    keys = {k: getattr(opts, k) for k in _SECURITY_KEYS}
    return Security.from_config({k: v for k, v in keys.items() if v})


def make_client(target: str, *, timeout: float, replicas: int, retry_after_s: float,
                security: Security, segment_blocks: int = DEFAULT_SEGMENT_BLOCKS) -> StoreClient:
    """A ``Client`` for one ``HOST:PORT`` (2 attempts a call), else a ``ShardedClient`` (one
    attempt a node; a node that fails is skipped for ``max(retry_after_s, 1)`` seconds)."""
    from turbokv.client import Client
    from turbokv.sharded_client import ShardedClient
    target = target.strip()
    if "," in target or target.startswith("dns:"):
        return ShardedClient(target, replicas=replicas, timeout=timeout, max_attempts=1,
                             node_down_seconds=max(retry_after_s, 1.0), security=security,
                             segment_blocks=segment_blocks)
    return Client(target, timeout=timeout, max_attempts=2, security=security)
