"""Test certificates made with Debian's openssl at test time: a CA, a server certificate for
127.0.0.1 / localhost, client certificates, and a second CA nobody trusts.

    pki = Pki(tmp_dir)          # files under tmp_dir
    pki.ca, pki.server_cert, pki.server_key
    pki.client("client-a")      # -> (cert, key) signed by the CA, CN and DNS SAN client-a
    pki.client("mallory", rogue=True)  # signed by the rogue CA
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

import pytest


def _openssl(*args: str) -> None:
    p = subprocess.run(["openssl"] + list(args), capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args), p.stderr))


def token_digest(token: str) -> str:
    """The token file's form of a token: sha256:<hex> (printf '%s' "$TOKEN" | sha256sum)."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class Pki:
    def __init__(self, root: str):
        if shutil.which("openssl") is None:
            pytest.skip("openssl not installed")
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.ca, self.ca_key = self._ca("ca")
        self.rogue_ca, self.rogue_ca_key = self._ca("rogue-ca")
        self.server_cert, self.server_key = self._leaf(
            "server", "localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "extendedKeyUsage=serverAuth\n", self.ca, self.ca_key)

    def _path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def _ca(self, name: str) -> tuple[str, str]:
        crt, key = self._path(name + ".crt"), self._path(name + ".key")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj",
                 "/CN=turbokv test " + name, "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return crt, key

    def _leaf(self, name: str, cn: str, ext: str, ca: str, ca_key: str) -> tuple[str, str]:
        crt, key, csr = (self._path(name + ".crt"), self._path(name + ".key"),
                         self._path(name + ".csr"))
        extfile = self._path(name + ".ext")
        with open(extfile, "w") as f:
            f.write(ext)
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", "/CN=" + cn)
        _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
                 "-out", crt, "-days", "2", "-extfile", extfile)
        return crt, key

    def client(self, cn: str, rogue: bool = False) -> tuple[str, str]:
        ca, key = (self.rogue_ca, self.rogue_ca_key) if rogue else (self.ca, self.ca_key)
        return self._leaf("client-" + cn + ("-rogue" if rogue else ""), cn,
                          "subjectAltName=DNS:%s\nextendedKeyUsage=clientAuth\n" % cn, ca, key)
