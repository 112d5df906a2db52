"""turbokv: Python client of the turbokv KV-cache store.

    from turbokv import Client, PrefixHasher, StatusCode, TurboKVError

``Client`` speaks the gRPC API of proto/turbokv/v1/turbokv.proto; ``PrefixHasher`` computes
block hashes (the cross-language contract in hasher.py). Names are imported lazily so that the
``turbokv.models`` subpackage works without grpc installed.
"""
from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "Client": ("turbokv.client", "Client"),
    "NamespaceInfo": ("turbokv.client", "NamespaceInfo"),
    "BlockResult": ("turbokv.client", "BlockResult"),
    "LookupResult": ("turbokv.client", "LookupResult"),
    "NamespaceStats": ("turbokv.client", "NamespaceStats"),
    "ServerStats": ("turbokv.client", "ServerStats"),
    "StatusCode": ("turbokv.errors", "StatusCode"),
    "TurboKVError": ("turbokv.errors", "TurboKVError"),
    "PrefixHasher": ("turbokv.hasher", "PrefixHasher"),
    "ShardedClient": ("turbokv.sharded_client", "ShardedClient"),
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError("module 'turbokv' has no attribute %r" % name)


def __dir__():
    return sorted(list(globals()) + __all__)
