"""How a client reaches a secured turbokv server: TLS (a CA to trust, optionally a client
certificate for mutual TLS) and a bearer token (docs/server.md, "Security").

    sec = Security(ca_file="/etc/turbokv/tls/ca.crt", token_file="/etc/turbokv/token")
    c = Client("turbokv.example:50051", security=sec)

``Security.from_env()`` reads ``TURBOKV_TLS_CA``, ``TURBOKV_TLS_CERT``, ``TURBOKV_TLS_KEY``,
``TURBOKV_TLS_SERVER_NAME``, ``TURBOKV_TOKEN`` and ``TURBOKV_TOKEN_FILE``; the vLLM connector
and the LMCache plugin take the same settings as config keys (``tls_ca``, ``tls_cert``,
``tls_key``, ``tls_server_name``, ``token``, ``token_file``).

A token is sent as ``authorization: Bearer <token>`` metadata on every call: over TLS as gRPC
call credentials, over plaintext (meant for loopback tests only) by an interceptor.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@dataclass(frozen=True)
class Security:
    """TLS and token settings of a connection; the default is plaintext without a token.

    Attributes:
      tls: use TLS. Implied by any of ca_file, cert_file, key_file.
      ca_file: PEM bundle of the CAs to trust for the server's certificate (None: the
        system's roots).
      cert_file, key_file: PEM client certificate and key, for a server with mutual TLS.
      server_name: the name to check the server's certificate against, when it differs from
        the target's host (gRPC's ``grpc.ssl_target_name_override``).
      token: a bearer token.
      token_file: a file holding the bearer token (surrounding whitespace stripped); read
        when a channel is made.
    """

    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    token: str | None = field(default=None, repr=False)  # never in a log line
    token_file: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS)")
        if self.token is not None and self.token_file is not None:
            raise ValueError("give token or token_file, not both")

    @property
    def uses_tls(self) -> bool:
        return self.tls or self.ca_file is not None or self.cert_file is not None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Security:
        """From ``TURBOKV_TLS_CA``, ``TURBOKV_TLS_CERT``, ``TURBOKV_TLS_KEY``,
        ``TURBOKV_TLS_SERVER_NAME``, ``TURBOKV_TLS`` (1: TLS with the system roots),
        ``TURBOKV_TOKEN`` and ``TURBOKV_TOKEN_FILE``; unset or empty variables are unset."""
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            v = env.get(name)
            return v if v else None

        return cls(tls=get("TURBOKV_TLS") in ("1", "true", "yes"),
                   ca_file=get("TURBOKV_TLS_CA"), cert_file=get("TURBOKV_TLS_CERT"),
                   key_file=get("TURBOKV_TLS_KEY"), server_name=get("TURBOKV_TLS_SERVER_NAME"),
                   token=get("TURBOKV_TOKEN"), token_file=get("TURBOKV_TOKEN_FILE"))

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Security:
        """From the keys ``tls`` (bool), ``tls_ca``, ``tls_cert``, ``tls_key``,
        ``tls_server_name``, ``token`` and ``token_file`` of an integration's config; missing
        keys fall back to :meth:`from_env`."""
        env = cls.from_env()

        def get(key: str, default: str | None) -> str | None:
            v = config.get(key)
            return str(v) if v else default

        return cls(tls=bool(config.get("tls", env.tls)),
                   ca_file=get("tls_ca", env.ca_file), cert_file=get("tls_cert", env.cert_file),
                   key_file=get("tls_key", env.key_file),
                   server_name=get("tls_server_name", env.server_name),
                   token=get("token", env.token if "token_file" not in config else None),
                   token_file=get("token_file", env.token_file if "token" not in config
                                  else None))

    def bearer_token(self) -> str | None:
        if self.token is not None:
            return self.token
        if self.token_file is not None:
            token = _read(self.token_file).decode().strip()
            if not token:
                raise ValueError("token file %s is empty" % self.token_file)
            return token
        return None

    def channel(self, target: str, options: Sequence[tuple[str, Any]]) -> grpc.Channel:
        """A gRPC channel to ``target`` with these settings."""
        opts: list[tuple[str, Any]] = list(options)
        token = self.bearer_token()
        if not self.uses_tls:
            channel = grpc.insecure_channel(target, options=opts)
            if token is None:
                return channel
            return grpc.intercept_channel(channel, _BearerInterceptor(token))
        if self.server_name:
            opts.append(("grpc.ssl_target_name_override", self.server_name))
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file) if self.ca_file else None,
            private_key=_read(self.key_file) if self.key_file else None,
            certificate_chain=_read(self.cert_file) if self.cert_file else None)
        if token is not None:
            creds = grpc.composite_channel_credentials(
                creds, grpc.access_token_call_credentials(token))
        return grpc.secure_channel(target, creds, options=opts)


_Metadata = list[tuple[str, str | bytes]]


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, base: grpc.ClientCallDetails, metadata: _Metadata):
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = tuple(metadata)
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class _BearerInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                         grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every call of a plaintext channel."""

    def __init__(self, token: str):
        self._header: tuple[str, str | bytes] = ("authorization", "Bearer " + token)

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata: _Metadata = list(details.metadata or [])
        metadata.append(self._header)
        return _CallDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Callable[..., Any],
                              client_call_details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any],
                               client_call_details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation: Callable[..., Any],
                               client_call_details: grpc.ClientCallDetails,
                               request_iterator: Any) -> Any:
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation: Callable[..., Any],
                                client_call_details: grpc.ClientCallDetails,
                                request_iterator: Any) -> Any:
        return continuation(self._details(client_call_details), request_iterator)
