"""Serving HTTPS (`--tls-cert-file`/`--tls-private-key-file`, `--client-ca-file`).

One server `SSLContext`: TLS 1.2+, ALPN `http/1.1` only (kubectl and client-go fall back from
h2), and with a client CA the client certificate is requested but optional
(`CERT_OPTIONAL`): a request without one may still carry a bearer token, as on kube-apiserver.
A certificate the CA did not sign fails the TLS handshake (kube-apiserver answers 401 instead;
both refuse it). Files are checked at start: a missing or malformed one is a one-line error
naming the file (`TlsConfigError`, exit 2).
"""

from __future__ import annotations

import ssl

import trio


class TlsConfigError(Exception):
    """A certificate, key or CA file that cannot be used; the message names the file."""


def server_context(cert_file: str, key_file: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except FileNotFoundError as exc:
        raise TlsConfigError(f"--tls-cert-file/--tls-private-key-file: {exc.filename}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(f"--tls-cert-file {cert_file} / --tls-private-key-file {key_file}: "
                             f"not a matching PEM certificate and key ({exc})") from None
    if client_ca_file:
        try:
            ctx.load_verify_locations(cafile=client_ca_file)
        except FileNotFoundError:
            raise TlsConfigError(f"--client-ca-file {client_ca_file}: no such file") from None
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TlsConfigError(f"--client-ca-file {client_ca_file}: no PEM CA certificate in it ({exc})") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def wrap(listeners: list[trio.SocketListener], ctx: ssl.SSLContext) -> list[trio.abc.Listener]:
    """The same listeners, speaking TLS (the handshake runs in `httpserver`, per connection)."""
    return [trio.SSLListener(listener, ctx, https_compatible=True) for listener in listeners]
