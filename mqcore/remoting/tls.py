"""TLS on a remoting port, with Apache RocketMQ 4.x's modes, and the broker's certificate.

``tls.server.mode`` (RocketMQ's key): ``disabled`` (plaintext only), ``enforcing`` (TLS
only) or ``permissive`` (both on one port). A 4.x remoting frame starts with its length, so a
plaintext connection's first byte is below ``0x16`` for any frame under 352 MiB, while a TLS
client starts with a handshake record (``0x16``): the server peeks at that byte, as
RocketMQ's ``HandshakeHandler`` does, and serves the connection over TLS or not. In
enforcing mode a plaintext connection is closed; in every mode a connection that sends
nothing for ``SNIFF_TIMEOUT_S``, or does not finish its TLS handshake in
``handshake_timeout_s``, is closed.

The certificate: ``tls.server.certPath``/``tls.server.keyPath`` (PEM files), else a
self-signed pair made once in ``<store>/grpc-tls/`` (the one the 5.x gRPC port uses, so both
ports present the same certificate). ``tls.server.need.client.auth``: ``none``,
``optional`` or ``require`` a client certificate, checked against
``tls.server.trustCertPath``.
"""
from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
import os
import ssl
import tempfile
from pathlib import Path

from mqcore.errors import ConfigError

log = logging.getLogger(__name__)

SELF_SIGNED_DIR = "grpc-tls"
#: a TLS record's first byte when it carries a handshake (a ClientHello)
TLS_HANDSHAKE_BYTE = 0x16
#: a connection that sends nothing for this long is closed before it becomes a channel
SNIFF_TIMEOUT_S = 10.0
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"

    @classmethod
    def parse(cls, text: str, key: str = "tls.server.mode") -> "TlsMode":
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ConfigError(f"{key} {text!r} is not disabled, permissive or enforcing") from None


class ClientAuth(enum.Enum):
    """``tls.server.need.client.auth``."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"

    @classmethod
    def parse(cls, text: str) -> "ClientAuth":
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ConfigError(f"tls.server.need.client.auth {text!r} is not none, optional or require") from None


@dataclasses.dataclass(frozen=True)
class TlsServerConfig:
    """What a remoting server needs to serve TLS (the context is built once, at start)."""

    mode: TlsMode
    context: ssl.SSLContext | None = None
    handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.mode is not TlsMode.DISABLED and self.context is None:
            raise ConfigError(f"tls.server.mode={self.mode.value} needs a certificate (an SSL context)")
        if self.handshake_timeout_s <= 0:
            raise ConfigError(f"handshake_timeout_s must be > 0, got {self.handshake_timeout_s}")


def server_context(cert_pem: bytes, key_pem: bytes, *, client_auth: ClientAuth = ClientAuth.NONE,
                   trust_cert_path: str | None = None) -> ssl.SSLContext:
    """A TLS server context for the PEM pair (TLS 1.2 or later)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_pair(ctx, cert_pem, key_pem)
    if client_auth is not ClientAuth.NONE:
        if not trust_cert_path:
            raise ConfigError("tls.server.need.client.auth needs tls.server.trustCertPath (the CA of the "
                              "client certificates)")
        try:
            ctx.load_verify_locations(cafile=trust_cert_path)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot read tls.server.trustCertPath {trust_cert_path}: {e}") from e
        ctx.verify_mode = ssl.CERT_REQUIRED if client_auth is ClientAuth.REQUIRE else ssl.CERT_OPTIONAL
    return ctx


def client_context(*, trust_cert_path: str | None = None, cert_path: str | None = None,
                   key_path: str | None = None) -> ssl.SSLContext:
    """A TLS client context. Without ``trust_cert_path`` the server's certificate is not
    checked (RocketMQ's client default, ``tls.test.mode.enable``/``tls.client.authServer=false``:
    the broker's self-signed certificate is accepted); with it, the server must present a
    certificate that CA signed. ``cert_path``/``key_path``: this client's own certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if trust_cert_path:
        try:
            ctx.load_verify_locations(cafile=trust_cert_path)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot read the TLS trust certificate {trust_cert_path}: {e}") from e
        ctx.check_hostname = False  # brokers are addressed by IP; the CA is what is checked
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert_path or key_path:
        if not (cert_path and key_path):
            raise ConfigError("the client's TLS certificate and key go together")
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot load the client's TLS certificate {cert_path} / key {key_path}: {e}") from e
    return ctx


def _load_pair(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    # ssl loads a chain from files only: a private temporary directory holds them for the call
    with tempfile.TemporaryDirectory(prefix="mqcore-tls-") as tmp:
        cert_file, key_file = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        Path(cert_file).write_bytes(cert_pem)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem)
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except ssl.SSLError as e:
            raise ConfigError(f"the TLS certificate and key do not load: {e}") from e


def load_or_make_certificate(cert_path: str | None, key_path: str | None, store_dir: str,
                             keys: str = "grpcServerTlsCert and grpcServerTlsKey") -> tuple[bytes, bytes]:
    """(certificate chain PEM, private key PEM): the configured files, else the broker's own
    self-signed pair from ``<store>/grpc-tls/``, made on first use. ``keys``: the
    configuration keys naming the files, for messages."""
    if cert_path or key_path:
        if not (cert_path and key_path):
            raise ConfigError(f"{keys} go together")
        try:
            return Path(cert_path).read_bytes(), Path(key_path).read_bytes()
        except OSError as e:
            raise ConfigError(f"cannot read the TLS certificate or key ({keys}): {e}") from e
    folder = Path(store_dir) / SELF_SIGNED_DIR
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    if cert_file.is_file() and key_file.is_file():
        return cert_file.read_bytes(), key_file.read_bytes()
    cert, key = make_self_signed()
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the key is readable by its owner only
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    cert_file.write_bytes(cert)
    log.info("TLS: made a self-signed certificate in %s (set %s for a real one)", folder, keys)
    return cert, key


def make_self_signed(host: str = "localhost") -> tuple[bytes, bytes]:
    """A self-signed certificate for ``host`` (and 127.0.0.1), valid 10 years, EC P-256."""
    import ipaddress

    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ConfigError("a self-signed TLS certificate needs the cryptography package (pip install "
                          "'mqcore[tls]'), or name a certificate (tls.server.certPath/keyPath)") from None
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


