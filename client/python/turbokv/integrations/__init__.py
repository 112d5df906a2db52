"""Serving-engine integrations of turbokv (each imports its engine lazily, on use).

* ``turbokv.integrations.vllm``: ``TurboKVConnector``, a vLLM V1 KV connector
  (``KVConnectorBase_V1``) loaded by vLLM's ``kv_connector_module_path``. Needs vLLM (and so
  torch) in the environment; see ``docs/vllm.md``.
* ``turbokv.integrations.vllm_layout``: the mapping between vLLM's paged KV cache tensors and
  turbokv's raw block layout, per attention backend (torch only).
* ``turbokv.integrations.lmcache``: ``TurboKVConnectorAdapter``, an LMCache 0.5.x remote
  storage plugin (``remote_storage_plugins`` + ``extra_config``). Needs LMCache (and so torch)
  in the environment; see its module docstring.

Importing this package imports no engine, no torch and no gRPC.
"""
