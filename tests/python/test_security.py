"""TLS, mutual TLS, bearer tokens -> tenants, tenant isolation, quotas, protected mode and the
audit log, against the real turbokv-server binary with certificates made by openssl at test
time (tests/python/pki.py). docs/server.md, "Security", is the contract."""
from __future__ import annotations

import os
import re
import signal
import socket
import time
import urllib.request

import numpy as np
import pytest

from conftest import ServerProcess, find_server_binary, require_stubs
from pki import Pki, token_digest

pytestmark = pytest.mark.integration

TOKEN_A = "tenant-a-secret-0123456789"
TOKEN_B = "tenant-b-secret-9876543210"
TOKEN_ADMIN = "operator-secret-abcdef"
SHAPE = dict(num_layers=2, num_kv_heads=2, head_dim=64, block_tokens=16)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


def _server(tmp_path, name, *args, metrics=False, listen_host="127.0.0.1"):
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    require_stubs()
    s = ServerProcess(binary, str(tmp_path / (name + "-data")), str(tmp_path / (name + ".log")),
                      extra_args=list(args), metrics=metrics, listen_host=listen_host)
    return s.start()


def _token_file(path, lines):
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write("# turbokv token file (test)\n" + "\n".join(lines) + "\n")
    os.replace(tmp, str(path))
    return str(path)


def _stub(address, security):
    from turbokv.v1 import turbokv_pb2_grpc as pb_grpc
    ch = security.channel(address, [])
    return ch, pb_grpc.TurboKVStub(ch)


def _refused(fn):
    import grpc
    with pytest.raises(grpc.RpcError) as e:
        r = fn()
        if hasattr(r, "__iter__") and not hasattr(r, "ByteSize"):
            list(r)  # a server stream fails on reading
    return e.value.code(), e.value.details()


def _blocks(n, seed=0):
    rng = np.random.default_rng(seed)
    L, H, D, bt = SHAPE["num_layers"], SHAPE["num_kv_heads"], SHAPE["head_dim"], \
        SHAPE["block_tokens"]
    return rng.normal(0, 1, (n, L, 2, bt, H, D)).astype(np.float16)


def _hashes(n, tag=b"p"):
    return [tag + i.to_bytes(8, "little") for i in range(n)]


def _client(address, **sec):
    from turbokv import Client, Security
    return Client(address, timeout=30.0, max_attempts=1, security=Security(**sec))


# -- TLS and mutual TLS -------------------------------------------------------------------
def test_tls_round_trip_and_refusals(tmp_path, pki):
    import grpc
    from turbokv.v1 import turbokv_pb2 as pb

    from turbokv import Security
    from turbokv.errors import StatusCode, TurboKVError
    s = _server(tmp_path, "tls", "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                "--insecure-allow-remote")
    try:
        with _client(s.address, ca_file=pki.ca) as c:
            ns = c.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
            blocks = _blocks(2)
            c.put_blocks(ns, _hashes(2), blocks)
            got = c.get_blocks(ns, _hashes(2))
            assert np.array_equal(got[0], blocks[0]) and np.array_equal(got[1], blocks[1])
        # Plaintext against a TLS port, and TLS trusting another CA: no connection.
        for sec in (Security(), Security(ca_file=pki.rogue_ca)):
            ch, stub = _stub(s.address, sec)
            code, _ = _refused(lambda: stub.Stats(pb.StatsRequest(), timeout=5))
            assert code == grpc.StatusCode.UNAVAILABLE
            ch.close()
        with pytest.raises(TurboKVError) as e:
            with _client(s.address, ca_file=pki.rogue_ca) as c:
                c.stats()
        assert e.value.code == StatusCode.UNAVAILABLE
    finally:
        s.stop()


def test_renewed_certificate_is_picked_up_without_restart(tmp_path, pki):
    """The certificate files are watched (--cert-refresh-seconds): replacing them, as
    cert-manager does, changes what new connections get."""
    import shutil

    from turbokv.errors import TurboKVError
    cert, key = str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    s = _server(tmp_path, "renew", "--tls-cert", cert, "--tls-key", key,
                "--cert-refresh-seconds", "1")
    try:
        with _client(s.address, ca_file=pki.ca) as c:
            c.stats()
        # Renewed by another CA: a client trusting only that CA connects once the watcher
        # has read the new files.
        new_cert, new_key = pki._leaf("server-renewed", "localhost",
                                      "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
                                      pki.rogue_ca, pki.rogue_ca_key)
        for src, dst in ((new_key, key), (new_cert, cert)):
            shutil.copy(src, dst + ".tmp")
            os.replace(dst + ".tmp", dst)
        deadline = time.monotonic() + 15
        while True:
            try:
                with _client(s.address, ca_file=pki.rogue_ca) as c:
                    c.stats(timeout=2)
                break
            except TurboKVError:
                assert time.monotonic() < deadline, "renewed certificate not served"
                time.sleep(0.2)
    finally:
        s.stop()


def test_mutual_tls(tmp_path, pki):
    import grpc
    from turbokv.v1 import turbokv_pb2 as pb

    from turbokv import Security
    good_cert, good_key = pki.client("client-a")
    rogue_cert, rogue_key = pki.client("client-a", rogue=True)
    s = _server(tmp_path, "mtls", "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                "--tls-client-ca", pki.ca, metrics=True)
    try:
        with _client(s.address, ca_file=pki.ca, cert_file=good_cert, key_file=good_key) as c:
            ns = c.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
            c.put_blocks(ns, _hashes(1), _blocks(1))
            assert c.lookup(ns, _hashes(1)).matched_blocks == 1
        # No client certificate, and one signed by a CA the server does not trust: the
        # handshake fails, no call reaches the service; each refusal is counted and logged.
        for sec in (Security(ca_file=pki.ca),
                    Security(ca_file=pki.ca, cert_file=rogue_cert, key_file=rogue_key)):
            ch, stub = _stub(s.address, sec)
            code, _ = _refused(lambda: stub.Stats(pb.StatsRequest(), timeout=5))
            assert code == grpc.StatusCode.UNAVAILABLE
            ch.close()
        metrics = _scrape(s)
        assert _sample(metrics, 'turbokv_auth_failures_total{reason="tls_no_client_cert"}') >= 1
        assert _sample(metrics, 'turbokv_auth_failures_total{reason="tls_client_cert"}') >= 1
        log = s.log()
        assert "audit: refused TLS handshake: tls_no_client_cert" in log, log
        assert ("audit: refused TLS handshake: tls_client_cert (unable to get local issuer "
                "certificate; certificate sha256 %s)" % _fingerprint(rogue_cert)) in log, log
        # The good client still gets through, and was never counted.
        with _client(s.address, ca_file=pki.ca, cert_file=good_cert, key_file=good_key) as c:
            assert c.lookup(ns, _hashes(1)).matched_blocks == 1
        assert _sample(_scrape(s), 'turbokv_auth_failures_total{reason="tls_client_cert"}') == \
            _sample(metrics, 'turbokv_auth_failures_total{reason="tls_client_cert"}')
    finally:
        s.stop()


def _scrape(s):
    return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % s.metrics_port,
                                  timeout=10).read().decode()


def _fingerprint(cert_path):
    import hashlib
    import ssl
    with open(cert_path) as f:
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(f.read())).hexdigest()


def test_sighup_reloads_certificates_and_client_ca(tmp_path, pki):
    """SIGHUP re-reads the server certificate, key and client CA at once (the change-on-disk
    check is an hour away here): new connections get the new certificate, client
    certificates of the new CA are accepted and those of the old one refused. A reload whose
    files do not match keeps what is served."""
    import shutil

    from turbokv.errors import TurboKVError
    cert, key, ca = (str(tmp_path / n) for n in ("tls.crt", "tls.key", "ca.crt"))
    for src, dst in ((pki.server_cert, cert), (pki.server_key, key), (pki.ca, ca)):
        shutil.copy(src, dst)
    old_client = pki.client("rotating-old")
    new_client = pki.client("rotating-new", rogue=True)
    s = _server(tmp_path, "sighup", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca,
                "--cert-refresh-seconds", "3600", metrics=True)

    def client(trust, pair):
        return _client(s.address, ca_file=trust, cert_file=pair[0], key_file=pair[1])
    try:
        with client(pki.ca, old_client) as c:
            c.stats()
        # Rotate everything to the other CA, then SIGHUP.
        new_cert, new_key = pki._leaf("server-rotated", "localhost",
                                      "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
                                      pki.rogue_ca, pki.rogue_ca_key)
        for src, dst in ((new_key, key), (new_cert, cert), (pki.rogue_ca, ca)):
            shutil.copy(src, dst + ".tmp")
            os.replace(dst + ".tmp", dst)
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while True:
            try:
                with client(pki.rogue_ca, new_client) as c:
                    c.stats(timeout=2)
                break
            except TurboKVError:
                assert time.monotonic() < deadline, "rotated certificates not served after SIGHUP"
                time.sleep(0.2)
        for trust in (pki.ca, pki.rogue_ca):  # old server cert gone; old client CA refused
            with pytest.raises(TurboKVError):
                with client(trust, old_client) as c:
                    c.stats(timeout=2)
        metrics = _scrape(s)
        assert _sample(metrics, 'turbokv_auth_cert_reloads_total{result="ok"}') == 1
        assert _sample(metrics, 'turbokv_auth_failures_total{reason="tls_client_cert"}') >= 1
        # A key that is not the certificate's: nothing changes, the error is logged.
        shutil.copy(pki.server_key, key)
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while 'turbokv_auth_cert_reloads_total{result="error"}' not in _scrape(s):
            assert time.monotonic() < deadline, "failed reload not counted"
            time.sleep(0.1)
        time.sleep(1.5)  # longer than gRPC's poll of what is served
        with client(pki.rogue_ca, new_client) as c:
            c.stats(timeout=2)
        assert "TLS certificates not reloaded, the previous ones stay" in s.log()
    finally:
        s.stop()


def test_mtls_identity_maps_to_tenant(tmp_path, pki):
    """`cert <identity> <tenant>` entries: the client certificate alone names the tenant; a
    verified certificate the file does not name is UNAUTHENTICATED."""
    import grpc
    from turbokv.v1 import turbokv_pb2 as pb

    from turbokv import Security
    a_cert, a_key = pki.client("svc-a.example")
    x_cert, x_key = pki.client("svc-x.example")
    tokens = _token_file(tmp_path / "tokens", ["cert svc-a.example tenant-a",
                                               "token %s tenant-b" % token_digest(TOKEN_B)])
    s = _server(tmp_path, "mtls-map", "--tls-cert", pki.server_cert, "--tls-key",
                pki.server_key, "--tls-client-ca", pki.ca, "--token-file", tokens)
    try:
        with _client(s.address, ca_file=pki.ca, cert_file=a_cert, key_file=a_key) as a:
            ns_a = a.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
            assert [n.tenant for n in a.stats().namespaces] == ["tenant-a"]
        # The token wins over the certificate: tenant-b does not see tenant-a's namespace.
        with _client(s.address, ca_file=pki.ca, cert_file=a_cert, key_file=a_key,
                     token=TOKEN_B) as b:
            assert b.stats().namespaces == []
            assert ns_a not in [n.namespace_id for n in b.stats().namespaces]
        ch, stub = _stub(s.address, Security(ca_file=pki.ca, cert_file=x_cert, key_file=x_key))
        code, details = _refused(lambda: stub.Stats(pb.StatsRequest(), timeout=5))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert "client certificate" in details
        ch.close()
    finally:
        s.stop()


# -- tokens ------------------------------------------------------------------------------
def test_tokens_missing_wrong_revoked(tmp_path):
    import grpc
    from turbokv.v1 import turbokv_pb2 as pb

    from turbokv import Security
    path = tmp_path / "tokens"
    _token_file(path, ["token %s tenant-a" % token_digest(TOKEN_A),
                       "token %s tenant-b" % token_digest(TOKEN_B)])
    s = _server(tmp_path, "tokens", "--token-file", str(path), "--token-reload-ms", "100",
                metrics=True)
    try:
        for sec, want in ((Security(), "needs credentials"),
                          (Security(token="not-a-token"), "not valid"),
                          (Security(token=TOKEN_A + "x"), "not valid")):
            ch, stub = _stub(s.address, sec)
            for call in (lambda: stub.Stats(pb.StatsRequest(), timeout=5),
                         lambda: stub.Lookup(pb.LookupRequest(namespace_id=1), timeout=5),
                         lambda: stub.GetBlocks(pb.GetBlocksRequest(namespace_id=1,
                                                                     block_hashes=[b"x" * 8]),
                                                timeout=5)):
                code, details = _refused(call)
                assert code == grpc.StatusCode.UNAUTHENTICATED, details
                assert want in details
            ch.close()
        with _client(s.address, token=TOKEN_A) as a:
            assert a.stats().namespaces == []
        token_file = tmp_path / "token-b.txt"
        token_file.write_text(TOKEN_B + "\n")
        with _client(s.address, token_file=str(token_file)) as b:
            b.register_namespace(model="m", preset="raw", **SHAPE)

        # Revoke tenant-a's token: the watcher sees the change on disk.
        _token_file(path, ["token %s tenant-b" % token_digest(TOKEN_B)])
        ch, stub = _stub(s.address, Security(token=TOKEN_A))
        deadline = time.monotonic() + 10
        while True:
            try:
                stub.Stats(pb.StatsRequest(), timeout=5)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAUTHENTICATED
                break
            assert time.monotonic() < deadline, "revoked token still accepted"
            time.sleep(0.05)
        ch.close()
        # SIGHUP re-reads it now; a file that no longer parses keeps the previous tokens.
        _token_file(path, ["token %s tenant-a" % token_digest(TOKEN_A)])
        s.proc.send_signal(signal.SIGHUP)
        _wait_accepted(s.address, TOKEN_A)
        _token_file(path, ["token sha256:1234 tenant-a"])
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        with _client(s.address, token=TOKEN_A) as a:
            a.stats()
        log = s.log()
        assert "not reloaded, the previous tokens stay" in log
        # The audit line names method, peer and reason, never the token.
        assert re.search(r"audit: refused Stats from ipv[46]:\S+: missing_credentials", log), log
        assert re.search(r"audit: refused Lookup from ipv[46]:\S+: invalid_token", log), log
        assert "audit: refused GetBlocks" in log
        for secret in (TOKEN_A, TOKEN_B, "not-a-token"):
            assert secret not in log
        metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % s.metrics_port,
                                         timeout=10).read().decode()
        assert _sample(metrics, 'turbokv_auth_failures_total{reason="missing_credentials"}') >= 3
        assert _sample(metrics, 'turbokv_auth_failures_total{reason="invalid_token"}') >= 6
        assert _sample(metrics, 'turbokv_auth_token_file_reloads_total{result="error"}') >= 1
        assert _sample(metrics, 'turbokv_auth_token_file_reloads_total{result="ok"}') >= 2
        assert TOKEN_A not in metrics and "tenant-a" not in metrics
    finally:
        s.stop()


def test_token_file_replaced_by_a_directory_keeps_the_previous_tokens(tmp_path):
    """A directory at the token-file path opens and reads as empty text, which used to parse as
    a table without tokens: every caller, the admin too, was refused ("reloaded: 0 tokens").
    It is an unreadable file now: the previous table stays, the reload is logged and counted as
    an error, and a regular file at the path is picked up again."""
    import shutil
    path = tmp_path / "tokens"
    _token_file(path, ["token %s tenant-a" % token_digest(TOKEN_A),
                       "token %s ops admin" % token_digest(TOKEN_ADMIN)])
    s = _server(tmp_path, "tokens-dir", "--token-file", str(path), "--token-reload-ms", "100",
                metrics=True)
    try:
        with _client(s.address, token=TOKEN_A) as a:
            a.stats()
        os.remove(str(path))
        os.mkdir(str(path))
        s.proc.send_signal(signal.SIGHUP)  # and the watcher sees the new inode
        deadline = time.monotonic() + 10
        while "is not a regular file (a directory)" not in s.log():
            assert time.monotonic() < deadline, s.log()
            time.sleep(0.05)
        for token in (TOKEN_A, TOKEN_ADMIN):
            with _client(s.address, token=token) as c:
                c.stats()  # still accepted
        log = s.log()
        assert "reloaded: 0 tokens" not in log
        assert "not reloaded, the previous tokens stay" in log
        metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % s.metrics_port,
                                         timeout=10).read().decode()
        assert _sample(metrics, 'turbokv_auth_token_file_reloads_total{result="error"}') >= 1
        # A regular file again: read, and its table replaces the previous one.
        shutil.rmtree(str(path))
        _token_file(path, ["token %s tenant-b" % token_digest(TOKEN_B)])
        s.proc.send_signal(signal.SIGHUP)
        _wait_accepted(s.address, TOKEN_B)
        import grpc
        from turbokv.v1 import turbokv_pb2 as pb

        from turbokv import Security
        ch, stub = _stub(s.address, Security(token=TOKEN_A))
        code, _ = _refused(lambda: stub.Stats(pb.StatsRequest(), timeout=5))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        ch.close()
    finally:
        s.stop()


def _wait_accepted(address, token):
    import grpc
    from turbokv.v1 import turbokv_pb2 as pb

    from turbokv import Security
    ch, stub = _stub(address, Security(token=token))
    deadline = time.monotonic() + 10
    while True:
        try:
            stub.Stats(pb.StatsRequest(), timeout=5)
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED
            assert time.monotonic() < deadline, "token not accepted after reload"
            time.sleep(0.05)
    ch.close()


def _sample(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError("%s not in the scrape" % series)


# -- tenants -----------------------------------------------------------------------------
def test_cross_tenant_isolation(tmp_path):
    """Another tenant's namespace answers exactly like an unregistered one, for every call;
    the same descriptor registered by two tenants gives two namespaces sharing no block."""
    import grpc
    from turbokv.v1 import turbokv_pb2 as pb

    from turbokv import Security
    path = _token_file(tmp_path / "tokens", ["token %s tenant-a" % token_digest(TOKEN_A),
                                             "token %s tenant-b" % token_digest(TOKEN_B),
                                             "token %s ops admin" % token_digest(TOKEN_ADMIN)])
    s = _server(tmp_path, "tenants", "--token-file", path)
    try:
        a = _client(s.address, token=TOKEN_A)
        b = _client(s.address, token=TOKEN_B)
        desc = dict(model="shared-model", model_revision="r1", preset="raw",
                    cache_salt="same-salt", **SHAPE)
        info_a = a.register_namespace(**desc)
        blocks = _blocks(4)
        a.put_blocks(info_a.namespace_id, _hashes(4), blocks)
        info_b = b.register_namespace(**desc)
        assert info_b.created and info_b.namespace_id != info_a.namespace_id
        # B probing A's prefix in its own namespace: a true miss.
        assert b.lookup(info_b.namespace_id, _hashes(4)).matched_blocks == 0
        assert b.get_blocks(info_b.namespace_id, _hashes(4)) == [None] * 4

        ch, stub = _stub(s.address, Security(token=TOKEN_B))
        unknown = 0x0123456789ABCDEF
        hashes = _hashes(4)

        def calls(ns):
            return [
                lambda: stub.Lookup(pb.LookupRequest(namespace_id=ns, block_hashes=hashes),
                                    timeout=5),
                lambda: stub.GetBlocks(pb.GetBlocksRequest(namespace_id=ns,
                                                           block_hashes=hashes), timeout=5),
                lambda: stub.DeleteBlocks(pb.DeleteBlocksRequest(namespace_id=ns,
                                                                 block_hashes=hashes), timeout=5),
                lambda: stub.DropNamespace(pb.DropNamespaceRequest(namespace_id=ns), timeout=5),
                lambda: stub.PutBlocks(iter([pb.PutBlocksRequest(
                    namespace_id=ns, block_hash=hashes[0], block_bytes=8, data=b"x" * 8)]),
                    timeout=5),
            ]
        for foreign, missing in zip(calls(info_a.namespace_id), calls(unknown)):
            code_f, details_f = _refused(foreign)
            code_m, details_m = _refused(missing)
            assert code_f == code_m == grpc.StatusCode.NOT_FOUND
            assert details_f == details_m.replace("%016x" % unknown,
                                                  "%016x" % info_a.namespace_id)
        ch.close()
        # Stats: each tenant sees its own; the admin sees both, with their tenants.
        assert [n.namespace_id for n in a.stats().namespaces] == [info_a.namespace_id]
        sb = b.stats()
        assert [n.namespace_id for n in sb.namespaces] == [info_b.namespace_id]
        assert sb.blocks == 0 and sb.used_bytes == 0
        assert a.stats().blocks == 4
        with _client(s.address, token=TOKEN_ADMIN) as ops:
            st = ops.stats()
            assert {(n.namespace_id, n.tenant) for n in st.namespaces} == {
                (info_a.namespace_id, "tenant-a"), (info_b.namespace_id, "tenant-b")}
            assert st.blocks == 4
        # A's blocks survived B's delete and drop attempts, bit for bit.
        got = a.get_blocks(info_a.namespace_id, _hashes(4))
        assert all(np.array_equal(g, w) for g, w in zip(got, blocks))
        # Ownership survives a restart.
        s.stop()
        s.start()
        a2 = _client(s.address, token=TOKEN_A)
        b2 = _client(s.address, token=TOKEN_B)
        assert [n.namespace_id for n in a2.stats().namespaces] == [info_a.namespace_id]
        assert [n.namespace_id for n in b2.stats().namespaces] == [info_b.namespace_id]
        assert a2.lookup(info_a.namespace_id, _hashes(4)).matched_blocks == 4
        for c in (a, b, a2, b2):
            c.close()
    finally:
        s.stop()


def test_namespace_limit_is_per_tenant(tmp_path):
    """A tenant that fills its own namespace limit leaves room for the others (one tenant used
    to fill --max-namespaces for everyone); the total limit still holds; a drop frees a place."""
    from turbokv.errors import StatusCode, TurboKVError
    path = _token_file(tmp_path / "tokens", ["token %s tenant-a" % token_digest(TOKEN_A),
                                             "token %s tenant-b" % token_digest(TOKEN_B)])
    s = _server(tmp_path, "ns-limit", "--token-file", path, "--max-namespaces", "5",
                "--max-namespaces-per-tenant", "3")
    try:
        a = _client(s.address, token=TOKEN_A)
        b = _client(s.address, token=TOKEN_B)

        def desc(i):
            return dict(model="m", model_revision="r", preset="raw", cache_salt="s%d" % i,
                        **SHAPE)
        ids = [a.register_namespace(**desc(i)).namespace_id for i in range(3)]
        with pytest.raises(TurboKVError) as e:
            a.register_namespace(**desc(3))
        assert e.value.code == StatusCode.RESOURCE_EXHAUSTED
        assert "--max-namespaces-per-tenant" in e.value.details
        assert a.register_namespace(**desc(0)).namespace_id == ids[0]  # not a new one
        b.register_namespace(**desc(0))
        b.register_namespace(**desc(1))
        with pytest.raises(TurboKVError) as e:  # 5 in total now
            b.register_namespace(**desc(2))
        assert e.value.code == StatusCode.RESOURCE_EXHAUSTED
        assert "--max-namespaces)" in e.value.details
        a.drop_namespace(ids[2])
        b.register_namespace(**desc(2))
        with pytest.raises(TurboKVError):
            a.register_namespace(**desc(2))  # the total is full again
        a.close()
        b.close()
    finally:
        s.stop()


def test_tenant_quota(tmp_path):
    """A tenant at its quota keeps putting: the store evicts the tenant's own least valuable
    blocks (never another tenant's), and refuses only what cannot fit in the quota at all."""
    from turbokv.errors import StatusCode
    quota = 100 * 1024  # raw blocks of this shape are 16 KiB + header: 6 fit
    path = _token_file(tmp_path / "tokens", ["token %s tenant-a" % token_digest(TOKEN_A),
                                             "token %s tenant-b" % token_digest(TOKEN_B),
                                             "quota tenant-a %d" % quota])
    s = _server(tmp_path, "quota", "--token-file", path)
    try:
        a = _client(s.address, token=TOKEN_A)
        b = _client(s.address, token=TOKEN_B)
        info = a.register_namespace(model="m", preset="raw", **SHAPE)
        ns_a, block = info.namespace_id, info.packed_block_bytes
        ns_b = b.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
        assert a.stats().capacity_bytes == quota and quota // block == 6
        a.put_blocks(ns_a, _hashes(4, b"a"), _blocks(4))
        # The second stream stores all four: the last two evict two of tenant-a's blocks.
        codes = [r.code for r in a.put_blocks(ns_a, _hashes(4, b"b"), _blocks(4))]
        assert codes == [StatusCode.OK] * 4
        st = a.stats()
        assert st.blocks == 6 and st.used_bytes == 6 * block <= quota
        assert a.lookup(ns_a, _hashes(4, b"b")).matched_blocks == 4
        # The first chain lost its tail (the policy evicts a chain from its end): a0, a1 stay.
        assert a.lookup(ns_a, _hashes(4, b"a")).matched_blocks == 2
        # Other tenants are not limited by tenant-a's quota, and lose nothing to it.
        b.put_blocks(ns_b, _hashes(12, b"d"), _blocks(12))
        a.put_blocks(ns_a, _hashes(4, b"e"), _blocks(4))
        assert b.stats().blocks == 12 and a.stats().blocks == 6
        # A quota lowered under what the tenant stores (token file re-read on SIGHUP): its
        # next put evicts down to it; a request's own earlier blocks are never evicted for its
        # later ones, so of a 4-block request only the first fits in 32 KiB.
        _token_file(tmp_path / "tokens", ["token %s tenant-a" % token_digest(TOKEN_A),
                                          "token %s tenant-b" % token_digest(TOKEN_B),
                                          "quota tenant-a 32KiB"])
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while a.stats().capacity_bytes != 32 * 1024:
            assert time.monotonic() < deadline, "lowered quota not read"
            time.sleep(0.05)
        results = a.put_blocks(ns_a, _hashes(4, b"c"), _blocks(4))
        assert [r.code for r in results] == [StatusCode.OK] + [StatusCode.RESOURCE_EXHAUSTED] * 3
        assert "quota of %d bytes" % (32 * 1024) in results[1].message
        assert a.stats().blocks == 1 and b.stats().blocks == 12
        a.close()
        b.close()
    finally:
        s.stop()


def test_quota_holds_within_one_stream(tmp_path):
    """One PutBlocks stream whose blocks together pass the quota: a request's own earlier blocks
    are never evicted for its later ones, so the stream stores what fits and the rest get
    RESOURCE_EXHAUSTED results naming the quota."""
    from turbokv.errors import StatusCode
    quota = 100 * 1024
    path = _token_file(tmp_path / "tokens", ["token %s tenant-a" % token_digest(TOKEN_A),
                                             "quota tenant-a %d" % quota])
    s = _server(tmp_path, "quota-stream", "--token-file", path)
    try:
        with _client(s.address, token=TOKEN_A) as a:
            info = a.register_namespace(model="m", preset="raw", **SHAPE)
            block = info.packed_block_bytes
            fits = quota // block
            assert 1 < fits < 12
            results = a.put_blocks(info.namespace_id, _hashes(12), _blocks(12))  # one stream
            codes = [r.code for r in results]
            assert codes == [StatusCode.OK] * fits + [StatusCode.RESOURCE_EXHAUSTED] * (12 - fits)
            assert "quota of %d bytes" % quota in results[fits].message
            st = a.stats()
            assert st.blocks == fits and st.used_bytes == fits * block <= quota
            assert a.lookup(info.namespace_id, _hashes(12)).matched_blocks == fits
    finally:
        s.stop()


def test_tenant_stats_hide_server_wide_counters(tmp_path):
    """Evictions count every tenant's blocks: a tenant's Stats shows 0, the admin the count."""
    path = _token_file(tmp_path / "tokens", ["token %s tenant-a" % token_digest(TOKEN_A),
                                             "token %s tenant-b" % token_digest(TOKEN_B),
                                             "token %s ops admin" % token_digest(TOKEN_ADMIN)])
    s = _server(tmp_path, "stats-leak", "--token-file", path, "--capacity", "512KiB")
    try:
        a = _client(s.address, token=TOKEN_A)
        b = _client(s.address, token=TOKEN_B)
        ops = _client(s.address, token=TOKEN_ADMIN)
        ns_a = a.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
        b.register_namespace(model="m", preset="raw", **SHAPE)
        for i in range(8):  # 1 MiB of raw blocks into 512 KiB: tenant-a's puts evict
            a.put_blocks(ns_a, _hashes(8, b"e%d" % i), _blocks(8, seed=i))
        deadline = time.monotonic() + 20
        while ops.stats().evicted_blocks == 0:
            assert time.monotonic() < deadline, "nothing evicted"
            time.sleep(0.1)
        for tenant in (a, b):
            st = tenant.stats()
            assert st.evicted_blocks == 0 and st.checksum_failures == 0
        assert b.stats().blocks == 0 and ops.stats().evicted_blocks > 0
        for c in (a, b, ops):
            c.close()
    finally:
        s.stop()


# -- protected mode ----------------------------------------------------------------------
def _non_loopback_ip():
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.connect(("10.255.255.255", 1))
            ip = u.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def test_protected_mode(tmp_path):
    import grpc
    from turbokv.v1 import turbokv_pb2 as pb

    from turbokv import Security
    ip = _non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    s = _server(tmp_path, "protected", listen_host="0.0.0.0")
    try:
        assert "protected mode" in s.log()
        ch, stub = _stub("%s:%d" % (ip, s.port), Security())
        code, details = _refused(lambda: stub.Stats(pb.StatsRequest(), timeout=5))
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert "protected mode" in details and "--insecure-allow-remote" in details
        ch.close()
        with _client(s.address) as c:  # loopback: answered
            c.stats()
        assert re.search(r"audit: refused Stats from ipv[46]:\S+: not_loopback", s.log())
    finally:
        s.stop()
    s = _server(tmp_path, "open", "--insecure-allow-remote", listen_host="0.0.0.0")
    try:
        assert "INSECURE" in s.log()
        with _client("%s:%d" % (ip, s.port)) as c:
            c.stats()
    finally:
        s.stop()


def test_bad_security_flags_fail_start(tmp_path, pki):
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    import subprocess
    cases = [
        (["--tls-cert", pki.server_cert], "--tls-cert and --tls-key go together"),
        (["--tls-cert", pki.server_cert, "--tls-key", pki.ca_key], "is not the key of"),
        (["--tls-client-ca", pki.ca], "needs --tls-cert"),
        (["--listen", "127.0.0.1"], ""),
    ]
    bad_tokens = tmp_path / "bad-tokens"
    bad_tokens.write_text("token %s\n" % TOKEN_A)  # a plain token, not its digest
    cases.append((["--token-file", str(bad_tokens)], "line 1: a token is stored as sha256"))
    for args, want in cases:
        listen = [] if "--listen" in args else ["--listen", "127.0.0.1:0"]
        p = subprocess.run([binary, "--data-dir", str(tmp_path / "d"), "--metrics-listen", ""] +
                           listen + args, capture_output=True, text=True, timeout=60)
        assert p.returncode != 0, (args, p.stdout, p.stderr)
        assert want in p.stdout + p.stderr, (args, p.stdout + p.stderr)
        assert TOKEN_A not in p.stdout + p.stderr


# -- the CLI (the C++ client) --------------------------------------------------------------
def test_cli_tls_and_token(tmp_path, pki, turbokv_cli):
    import json
    import subprocess
    cert, key = pki.client("cli-client")
    tokens = _token_file(tmp_path / "tokens", ["token %s tenant-a" % token_digest(TOKEN_A)])
    s = _server(tmp_path, "cli", "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                "--tls-client-ca", pki.ca, "--token-file", tokens)
    token_file = tmp_path / "token-a"
    token_file.write_text(TOKEN_A + "\n")

    def cli(*args, env=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith("TURBOKV_")}
        e.update(env or {})
        return subprocess.run([turbokv_cli, "--server", s.address, "--json", "--timeout", "10"] +
                              list(args), capture_output=True, text=True, timeout=60, env=e)
    try:
        tls = ["--tls-ca", pki.ca, "--tls-cert", cert, "--tls-key", key]
        p = cli(*tls, "--token-file", str(token_file), "ns", "register", "--model", "m",
                "--num-layers", "2", "--num-kv-heads", "2", "--head-dim", "64",
                "--block-tokens", "16", "--preset", "raw")
        assert p.returncode == 0, p.stdout + p.stderr
        # The same through the environment variables the Python client reads too.
        p = cli("stats", env={"TURBOKV_TLS_CA": pki.ca, "TURBOKV_TLS_CERT": cert,
                              "TURBOKV_TLS_KEY": key, "TURBOKV_TOKEN_FILE": str(token_file)})
        assert p.returncode == 0, p.stdout + p.stderr
        assert len(json.loads(p.stdout)["namespaces"]) == 1
        p = cli(*tls, "stats")  # no token, certificate not in the token file
        assert p.returncode == 1 and "UNAUTHENTICATED" in p.stdout + p.stderr, p.stdout + p.stderr
        p = cli("--tls-ca", pki.ca, "--token-file", str(token_file), "stats")  # no client cert
        assert p.returncode == 1 and "UNAVAILABLE" in p.stdout + p.stderr, p.stdout + p.stderr
    finally:
        s.stop()


def test_vllm_connector_options_reach_a_tls_token_server(tmp_path, pki):
    """The vLLM connector's kv_connector_extra_config keys (tls_ca, token_file, ...) give its
    client TLS and the token; a sharded dns:/// target checks the certificate's name through
    tls_server_name."""
    from turbokv.integrations.vllm_store import ConnectorOptions, make_client
    tokens = _token_file(tmp_path / "tokens", ["token %s tenant-a" % token_digest(TOKEN_A)])
    s = _server(tmp_path, "vllm", "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                "--token-file", tokens)
    token_file = tmp_path / "token-a"
    token_file.write_text(TOKEN_A)
    try:
        for server, extra in ((s.address, {}),
                              ("dns:///localhost:%d" % s.port, {"tls_server_name": "localhost"})):
            opts = ConnectorOptions.from_extra_config(dict(
                server=server, tls_ca=pki.ca, token_file=str(token_file), **extra))
            assert TOKEN_A not in repr(opts.security())
            c = make_client(opts, timeout=10.0)
            try:
                ns = c.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
                c.put_blocks(ns, _hashes(1), _blocks(1))
                assert c.lookup(ns, _hashes(1)).matched_blocks == 1
            finally:
                c.close()
    finally:
        s.stop()
