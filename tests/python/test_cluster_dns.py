"""dns:/// targets of the sharded Python client: resolution through socket.getaddrinfo, periodic
re-resolution (a headless Service that scales), and a failed resolution keeping the old nodes."""
from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from conftest import require_stubs


def _fake_getaddrinfo(table):
    def fake(host, port, *args, **kwargs):
        if host not in table or table[host] is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (ip, port)) for ip in table[host]]
    return fake


def test_dns_target_is_re_resolved(monkeypatch):
    require_stubs()
    from turbokv import ShardedClient
    table = {"turbokv.default.svc.cluster.local": ["10.255.0.2", "10.255.0.1"]}
    monkeypatch.setattr(socket, "getaddrinfo", _fake_getaddrinfo(table))
    c = ShardedClient("dns:///turbokv.default.svc.cluster.local:50051",
                      dns_refresh_seconds=0.05)
    try:
        assert c.nodes() == ["10.255.0.1:50051", "10.255.0.2:50051"]
        # The Service scales to three pods, IPv6 included: seen after the refresh period.
        table["turbokv.default.svc.cluster.local"] = ["10.255.0.1", "10.255.0.2", "10.255.0.3",
                                                      "fd00::1"]
        time.sleep(0.1)
        assert c.nodes() == ["10.255.0.1:50051", "10.255.0.2:50051", "10.255.0.3:50051",
                             "[fd00::1]:50051"]
        # A failed resolution keeps the previous nodes.
        table["turbokv.default.svc.cluster.local"] = None
        time.sleep(0.1)
        assert len(c.nodes()) == 4
        # Owners are computed over the current nodes.
        h = bytes(range(32))
        assert c.owners(h)[0] in c.nodes()
    finally:
        c.close()


def test_unresolvable_name_fails_at_construction(monkeypatch):
    require_stubs()
    from turbokv import ShardedClient
    monkeypatch.setattr(socket, "getaddrinfo", _fake_getaddrinfo({}))
    with pytest.raises(OSError):
        ShardedClient("dns:///nope.invalid:50051")


def test_dns_localhost_against_a_real_server(turbokv_server):
    require_stubs()
    from turbokv import PrefixHasher, ShardedClient
    port = turbokv_server.port
    c = ShardedClient("dns:///localhost:%d" % port, replicas=1)
    try:
        if "127.0.0.1:%d" % port not in c.nodes():
            pytest.skip("localhost does not resolve to 127.0.0.1 here: %s" % c.nodes())
        ns = c.register_namespace(model="dns", num_layers=1, num_kv_heads=1, head_dim=64,
                                  block_tokens=4, preset="raw").namespace_id
        chain = PrefixHasher(ns).block_hashes(np.arange(16), 4)
        blocks = np.ones((4, 1, 2, 4, 1, 64), np.float16)
        res = c.put_blocks(ns, chain, blocks)
        # With localhost also resolving to ::1 (not served), R = 1 blocks placed there fail per
        # block; those on 127.0.0.1 are stored.
        served = ["127.0.0.1:%d" % port]
        assert [r.ok for r in res] == [o[0] in served for o in c.placement(chain)]
        got = c.get_blocks(ns, chain)
        assert [g is not None for g in got] == [r.ok for r in res]
    finally:
        c.close()
