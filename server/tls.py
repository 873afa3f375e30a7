"""TLS as mongod offers it: `--tlsMode` disabled, allowTLS, preferTLS or requireTLS, the server's
certificate and key from `--tlsCertificateKeyFile`, client certificates checked against
`--tlsCAFile`. The standard library's `ssl` does the cryptography.

allowTLS and preferTLS take TLS and plain connections on the same port (they differ only in what
mongod uses for connections it makes itself, which this server never makes): the listener peeks at
each accepted socket's first bytes, without reading them, and wraps it in TLS when they open a TLS
handshake record (`opens_tls`)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

TLS_MODES = ("disabled", "allowTLS", "preferTLS", "requireTLS")
#: How long a client may take over its TLS handshake before the connection is dropped.
HANDSHAKE_TIMEOUT = 10.0


class TLSConfigError(Exception):
    """The TLS options do not make a working setup (a missing file, a key that does not match)."""


@dataclass(frozen=True)
class TLSSettings:
    mode: str = "disabled"
    certificate_key_file: str | None = None
    certificate_key_file_password: str | None = None
    ca_file: str | None = None
    #: With a CA file, clients must present a certificate unless this is set (mongod's rule).
    allow_connections_without_certificates: bool = False
    #: Accept client certificates that do not verify against the CA file.
    allow_invalid_certificates: bool = False

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    def check(self) -> str | None:
        """What is wrong with these options together, in mongod's words; None when nothing is."""
        if self.mode not in TLS_MODES:
            return f"unsupported value for tlsMode {self.mode!r}: use one of {', '.join(TLS_MODES)}"
        others = (
            self.certificate_key_file,
            self.certificate_key_file_password,
            self.ca_file,
        )
        if not self.enabled and any(value is not None for value in others):
            return "need to enable TLS via the tlsMode flag when using TLS configuration parameters"
        if self.enabled and self.certificate_key_file is None:
            return "need tlsCertificateKeyFile or certificateSelector when TLS is enabled"
        return None

    def parsed(self) -> dict[str, Any]:
        """net.tls in getCmdLineOpts' `parsed` (the key's password is never shown)."""
        out: dict[str, Any] = {"mode": self.mode}
        if self.certificate_key_file is not None:
            out["certificateKeyFile"] = self.certificate_key_file
        if self.certificate_key_file_password is not None:
            out["certificateKeyFilePassword"] = "<password>"
        if self.ca_file is not None:
            out["CAFile"] = self.ca_file
        if self.allow_connections_without_certificates:
            out["allowConnectionsWithoutCertificates"] = True
        if self.allow_invalid_certificates:
            out["allowInvalidCertificates"] = True
        return out


def server_context(settings: TLSSettings) -> ssl.SSLContext:
    """The server side's SSLContext; TLSConfigError names the file or setting at fault."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # mongod 7 disables TLS 1.0 and 1.1 by default
    assert settings.certificate_key_file is not None
    try:
        ctx.load_cert_chain(
            settings.certificate_key_file, password=settings.certificate_key_file_password
        )
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(
            f"cannot read the certificate and key in {settings.certificate_key_file}: "
            f"{exc.strerror or exc}"
        ) from exc
    if settings.ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=settings.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TLSConfigError(
                f"cannot read the CA file {settings.ca_file}: {exc.strerror or exc}"
            ) from exc
        if settings.allow_invalid_certificates:
            ctx.verify_mode = ssl.CERT_NONE
        elif settings.allow_connections_without_certificates:
            ctx.verify_mode = ssl.CERT_OPTIONAL
        else:
            ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def opens_tls(head: bytes) -> bool:
    """Whether a connection's first four bytes open a TLS handshake rather than a MongoDB message.

    A TLS record starts with its type (0x16, handshake), the protocol's major version (3), its
    minor version (0 to 4) and the high byte of its length, which a ClientHello of 256 bytes or
    more makes non-zero. A MongoDB message starts with its length, little-endian: the same first
    three bytes would mean a length of 790 plus a multiple of 65,536, and the fourth is zero
    below 16 MB, which every client's first message (its hello) is."""
    return head[0] == 0x16 and head[1] == 0x03 and head[2] <= 0x04 and head[3] != 0
