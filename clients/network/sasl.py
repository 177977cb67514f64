"""Client login settings: SASL/SCRAM (or PLAIN) over Kafka's SaslHandshake v1 + SaslAuthenticate.

A connection with a :class:`SaslLogin` logs in right after its ApiVersions exchange and
before any other request, as Kafka's clients do on a ``SASL_PLAINTEXT`` or ``SASL_SSL``
listener (with ``SASL_SSL`` the exchange runs inside the TLS session, see
:mod:`clients.network.tls`): SaslHandshake (v1) naming the mechanism, then the two SCRAM
rounds in SaslAuthenticate (the highest version both sides serve, at most 2); the
server's final message is verified, so a broker that does not know the password cannot
pretend it did.  A refused login raises :class:`AuthenticationError`
(SASL_AUTHENTICATION_FAILED, not retriable: retrying the same password cannot help); a
broker that does not offer the mechanism raises it with UNSUPPORTED_SASL_MECHANISM.

:func:`sasl_login_of` turns Kafka's client settings (``security_protocol``,
``sasl_mechanism``, ``sasl_plain_username``, ``sasl_plain_password``, the names
kafka-python uses) into a login, validating them: ``security_protocol`` is one of
``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL`` (any case); the ``sasl_*``
settings need ``SASL_PLAINTEXT`` or ``SASL_SSL`` and are refused with the other two;
the TLS side of ``SSL`` / ``SASL_SSL`` is :func:`clients.network.tls.ssl_context_of`.
Mechanisms: SCRAM-SHA-256 and SCRAM-SHA-512, and PLAIN (RFC 4616: one message carrying
the password itself) with ``SASL_SSL`` only - over ``SASL_PLAINTEXT`` it is refused here,
as our brokers offer it only on TLS ports.

The requests and the checks of their answers are the sans-IO
:func:`~clients.protocol.sasl_exchange.sasl_login`, run by the connection's
:class:`~clients.protocol.request_channel.Handshake` right after ApiVersions
(:meth:`clients.network.connection.BrokerConnection.connect` moves its bytes).

Costs: one PBKDF2 (4096 rounds, ~2 ms) and three round trips per connection, on the
connecting thread, each bounded by ``connect_timeout_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clients.network.tls import PROTOCOLS
from clients.protocol.errors import InvalidConfigError
from clients.protocol.scram import MECHANISMS, PLAIN

__all__ = ["SaslLogin", "sasl_login_of"]

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class SaslLogin:
    mechanism: str
    username: str
    password: bytes = field(repr=False)


def sasl_login_of(security_protocol: str, sasl_mechanism: str | None,
                  sasl_plain_username: str | None,
                  sasl_plain_password: str | bytes | None) -> SaslLogin | None:
    """The login Kafka's client settings ask for (None for PLAINTEXT and SSL)."""
    protocol = security_protocol.upper()
    if protocol not in PROTOCOLS:
        raise InvalidConfigError(f"security_protocol must be one of {', '.join(PROTOCOLS)}, "
                                 f"got {security_protocol!r}")
    if protocol not in SASL_PROTOCOLS:
        given = [name for name, value in (
            ("sasl_mechanism", sasl_mechanism), ("sasl_plain_username", sasl_plain_username),
            ("sasl_plain_password", sasl_plain_password)) if value]  # fmt: skip
        if given:
            raise InvalidConfigError(f"sasl_* settings ({', '.join(given)}) need "
                                     "security_protocol='SASL_PLAINTEXT' or 'SASL_SSL' "
                                     f"(security_protocol is {protocol!r})")
        return None
    if sasl_mechanism == PLAIN and protocol != "SASL_SSL":
        raise InvalidConfigError("sasl_mechanism='PLAIN' sends the password itself: it needs "
                                 "security_protocol='SASL_SSL'")
    if sasl_mechanism not in MECHANISMS and sasl_mechanism != PLAIN:
        raise InvalidConfigError(f"sasl_mechanism must be one of "
                                 f"{', '.join([*sorted(MECHANISMS), PLAIN])}, got "
                                 f"{sasl_mechanism!r}")
    if not sasl_plain_username or not sasl_plain_password:
        raise InvalidConfigError(f"{protocol} needs sasl_plain_username and "
                                 "sasl_plain_password")
    password = (sasl_plain_password.encode() if isinstance(sasl_plain_password, str)
                else bytes(sasl_plain_password))
    return SaslLogin(sasl_mechanism, sasl_plain_username, password)
