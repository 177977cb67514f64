"""Client TLS: the ``ssl.SSLContext`` Kafka's ``SSL`` / ``SASL_SSL`` settings ask for.

:func:`ssl_context_of` turns Kafka's client settings, under the names kafka-python uses
(``security_protocol``, ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``,
``ssl_password``, ``ssl_check_hostname``, ``ssl_context``), into one client context, or
None for ``PLAINTEXT`` / ``SASL_PLAINTEXT``.  The context verifies the broker's
certificate against ``ssl_cafile`` (the system's CAs without it), requires TLS 1.2 or
newer and, with ``ssl_check_hostname`` (the default, as Kafka's
``ssl.endpoint.identification.algorithm=https``), checks that the certificate names the
host the client connects to: the bootstrap address, then the host each broker
advertises in the metadata.  ``ssl_certfile`` (with ``ssl_keyfile`` and
``ssl_password`` when the key is separate or encrypted) adds a client certificate for
mutual TLS.  ``ssl_context`` is used as given instead (then the other ``ssl_*`` settings
must stay unset).  Settings that cannot work together, an unknown protocol, or a file
that cannot be read or parsed raise :class:`InvalidConfigError` naming the setting, at
construction, not at the first connection.  An encrypted key without ``ssl_password``
is refused too (OpenSSL would otherwise prompt on the terminal and hang the client).

:class:`~clients.network.connection.BrokerConnection` wraps its socket with the context
right after the TCP connect, before ApiVersions and any SASL login.  A certificate the
client rejects (unknown CA, expired, wrong host name) or a broker refusing ours (an
alert naming a certificate) is a :class:`SslAuthenticationError` (Kafka's
``SslAuthenticationException``: an :class:`AuthenticationError`, not retriable,
fatal for the producer); :func:`certificate_failure` recognises those.  Any other
handshake failure (timeout, a peer not speaking TLS) is the connection's
``NetworkError`` (retriable).

Costs: building a context parses the CA file (the system store without ``ssl_cafile``:
tens of ms) and the certificate chain once per client; every connection then pays a
TLS handshake (one extra round trip with TLS 1.3, two with 1.2, and a signature
check), and every byte an AES-GCM pass plus one copy (no ``sendmsg`` zero-copy).

Thread safety: :func:`ssl_context_of` only reads files; the context it returns may be
shared by all connections and threads of a client (``SSLContext.wrap_socket`` is
thread-safe), while each wrapped socket belongs to its connection's thread.
"""

from __future__ import annotations

import ssl
from typing import NoReturn

from clients.protocol.errors import AuthenticationError, InvalidConfigError

__all__ = ["PROTOCOLS", "TLS_PROTOCOLS", "SslAuthenticationError", "certificate_failure",
           "ssl_context_of"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")

# OpenSSL reasons of an alert by which the peer rejected our certificate (or its absence)
_REFUSED_CERTIFICATE = ("CERTIFICATE", "UNKNOWN_CA", "ACCESS_DENIED")


class SslAuthenticationError(AuthenticationError):
    """TLS authentication failed: the broker's certificate was not accepted (unknown CA,
    expired, host name not in it), or the broker refused ours (mutual TLS).  Kafka's
    ``SslAuthenticationException``; not retriable: the same certificates fail again.
    Its code is its parent's, SASL_AUTHENTICATION_FAILED (Kafka's error table has no
    TLS code: the failure never crosses the wire as a code)."""


def ssl_context_of(
    security_protocol: str,
    ssl_cafile: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    ssl_password: str | None,
    ssl_check_hostname: bool,
    ssl_context: ssl.SSLContext | None,
) -> ssl.SSLContext | None:
    """The client TLS context Kafka's settings ask for (None without TLS).

    Raises :class:`InvalidConfigError` naming the setting at fault.
    """
    protocol = security_protocol.upper() if isinstance(security_protocol, str) else None
    if protocol not in PROTOCOLS:
        raise InvalidConfigError(f"security_protocol must be one of {', '.join(PROTOCOLS)}, "
                                 f"got {security_protocol!r}")
    given = [name for name, value in (
        ("ssl_cafile", ssl_cafile), ("ssl_certfile", ssl_certfile),
        ("ssl_keyfile", ssl_keyfile), ("ssl_password", ssl_password),
        ("ssl_context", ssl_context),
    ) if value is not None]  # fmt: skip
    if not ssl_check_hostname:
        given.append("ssl_check_hostname=False")
    if protocol not in TLS_PROTOCOLS:
        if given:
            raise InvalidConfigError(
                f"{', '.join(given)} need security_protocol='SSL' or 'SASL_SSL' "
                f"(security_protocol is {protocol!r}, which does not use TLS)")
        return None
    if ssl_context is not None:
        return _checked_context(ssl_context, [g for g in given if g != "ssl_context"])
    for name, path in (("ssl_cafile", ssl_cafile), ("ssl_certfile", ssl_certfile),
                       ("ssl_keyfile", ssl_keyfile)):  # fmt: skip
        if path is not None:
            _check_readable(name, path)
    if ssl_certfile is None:
        for name, value in (("ssl_keyfile", ssl_keyfile), ("ssl_password", ssl_password)):
            if value is not None:
                raise InvalidConfigError(
                    f"{name} needs ssl_certfile (the client certificate for mutual TLS)")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ssl_cafile)
    except ssl.SSLError as e:
        raise InvalidConfigError(
            f"ssl_cafile={ssl_cafile!r} holds no usable PEM CA certificate: {e}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = bool(ssl_check_hostname)  # verify_mode stays CERT_REQUIRED
    if ssl_certfile is not None:
        _load_client_certificate(context, ssl_certfile, ssl_keyfile, ssl_password)
    return context


def _checked_context(context: ssl.SSLContext, others: list[str]) -> ssl.SSLContext:
    if not isinstance(context, ssl.SSLContext):
        raise InvalidConfigError(
            f"ssl_context must be an ssl.SSLContext, got {type(context).__name__}")
    if others:
        raise InvalidConfigError(
            f"ssl_context is used as given: leave {', '.join(others)} unset "
            f"(set them on the context instead)")
    if context.protocol == ssl.PROTOCOL_TLS_SERVER:
        raise InvalidConfigError(
            "ssl_context is a server context (PROTOCOL_TLS_SERVER); a client needs "
            "ssl.create_default_context() or ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)")
    return context


def _check_readable(setting: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise InvalidConfigError(
            f"{setting}={path!r} cannot be read: {e.strerror or e}") from None


def _load_client_certificate(context: ssl.SSLContext, certfile: str, keyfile: str | None,
                             password: str | None) -> None:
    key_setting = "ssl_keyfile" if keyfile is not None else "ssl_certfile"
    key_path = keyfile if keyfile is not None else certfile

    def no_password() -> NoReturn:  # called by OpenSSL only for an encrypted key
        raise InvalidConfigError(
            f"{key_setting}={key_path!r}: the private key is encrypted; set ssl_password")

    try:
        context.load_cert_chain(certfile, keyfile,
                                password if password is not None else no_password)
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            raise InvalidConfigError(
                f"{key_setting}={key_path!r} is not the private key of the certificate in "
                f"ssl_certfile={certfile!r}") from None
        hint = ("wrong ssl_password, or not a PEM certificate and private key"
                if password is not None else "not a PEM certificate and private key")
        raise InvalidConfigError(
            f"cannot load the client certificate from ssl_certfile={certfile!r}"
            + (f", ssl_keyfile={keyfile!r}" if keyfile is not None else "")
            + f" ({hint}): {e}") from None
    except ValueError as e:  # e.g. a password longer than OpenSSL takes
        raise InvalidConfigError(f"ssl_password: {e}") from None


def certificate_failure(error: BaseException, where: str) -> SslAuthenticationError | None:
    """The :class:`SslAuthenticationError` for a TLS failure about certificates, else None.

    ``where`` names the peer for the message (e.g. ``node 1 at host:9093``).  Covers our
    verification of the broker's certificate and the broker's alerts rejecting ours
    (with TLS 1.3 those arrive after the handshake, on the first read).
    """
    if isinstance(error, ssl.SSLCertVerificationError):
        reason = error.verify_message or str(error)
        if "hostname mismatch" in reason.lower() or "ip address mismatch" in reason.lower():
            hint = ("the broker's certificate does not name the host connected to: give the "
                    "broker a certificate for its advertised host name (or "
                    "ssl_check_hostname=False to skip this check)")
        else:
            hint = ("the broker's certificate is not trusted: is its CA in ssl_cafile? "
                    "(and is the certificate still valid?)")
        return SslAuthenticationError(f"{where}: TLS: {reason}; {hint}")
    if isinstance(error, ssl.SSLError):
        reason = str(error.reason or "")
        if "ALERT" in reason and any(r in reason for r in _REFUSED_CERTIFICATE):
            return SslAuthenticationError(
                f"{where}: TLS: the broker refused our certificate ({reason}): mutual TLS "
                f"needs ssl_certfile/ssl_keyfile signed by a CA the broker trusts")
    return None
