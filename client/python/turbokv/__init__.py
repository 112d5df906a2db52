"""turbokv: Python client of the turbokv KV-cache store.

    from turbokv import Client, PrefixHasher, StatusCode, TurboKVError

``Client`` speaks the gRPC API of proto/turbokv/v1/turbokv.proto; ``PrefixHasher`` computes
block hashes (the cross-language contract in hasher.py). Names are imported lazily: the hasher,
the errors and ``turbokv.codec`` work without grpc installed.
"""
from __future__ import annotations

import pkgutil

__version__ = "0.1.0"

# In a checkout the generated stubs (turbokv/v1) live in the build folder ($BUILD/python,
# scripts/gen_stubs.py), not in the source tree: when that folder is on sys.path too, this
# joins its turbokv/ to the package. An installed wheel carries turbokv/v1 itself.
__path__ = pkgutil.extend_path(__path__, __name__)

_LAZY = {
    "Client": ("turbokv.client", "Client"),
    "NamespaceInfo": ("turbokv.client", "NamespaceInfo"),
    "BlockResult": ("turbokv.client", "BlockResult"),
    "ChainContext": ("turbokv.sharding", "ChainContext"),
    "LookupResult": ("turbokv.client", "LookupResult"),
    "NamespaceStats": ("turbokv.client", "NamespaceStats"),
    "PolicyTuning": ("turbokv.client", "PolicyTuning"),
    "ServerStats": ("turbokv.client", "ServerStats"),
    "StatusCode": ("turbokv.errors", "StatusCode"),
    "TurboKVError": ("turbokv.errors", "TurboKVError"),
    "PrefixHasher": ("turbokv.hasher", "PrefixHasher"),
    "Security": ("turbokv.security", "Security"),
    "ShardedClient": ("turbokv.sharded_client", "ShardedClient"),
    "StoreClient": ("turbokv.store_client", "StoreClient"),
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
