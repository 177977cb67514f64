"""The client side of a SASL login, sans I/O: the requests to send and the checks of
each answer, for SaslHandshake v1 then SaslAuthenticate.

:func:`sasl_exchange` is a generator: each ``next`` / ``send(answer_body)`` yields the
next request as ``(api_key, api_version, body)``; it returns when the login is done and
raises :class:`~clients.protocol.errors.AuthenticationError` when it is refused
(SASL_AUTHENTICATION_FAILED, not retriable: the same password cannot do better), or with
UNSUPPORTED_SASL_MECHANISM when the broker does not take the mechanism.  Mechanisms:
SCRAM-SHA-256 and SCRAM-SHA-512 (two SaslAuthenticate rounds; the server's final message
is verified, so a broker that does not know the password cannot pretend it did) and
PLAIN (RFC 4616: one round carrying the password; callers allow it on TLS only).

:func:`sasl_login` starts the exchange for a connection's credentials once its
ApiVersions answer is known (SaslHandshake v1 and SaslAuthenticate must be served; the
SaslAuthenticate version is the highest both sides serve).

The driver owns the I/O and the timeouts: the client connection's
:class:`~clients.protocol.request_channel.Handshake` and the broker's asyncio client
(``broker.async_client``) both drive this one exchange.

Costs: one PBKDF2 (4096 rounds, ~2 ms) for SCRAM.  Thread-safety: one generator per
login, used by one thread.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import AuthenticationError, ErrorCode
from clients.protocol.registry import APIS
from clients.protocol.scram import PLAIN, ScramClient, ScramError, plain_token

# (api_key, api_version, body) of the next request of the exchange
SaslRequest = tuple[ApiKey, int, dict[str, Any]]


class SaslCredentials(Protocol):
    """What a login needs (``clients.network.sasl.SaslLogin`` is one)."""

    @property
    def mechanism(self) -> str: ...

    @property
    def username(self) -> str: ...

    @property
    def password(self) -> bytes: ...


def _accepted(answer: dict[str, Any], username: str) -> dict[str, Any]:
    if answer["error_code"]:
        raise AuthenticationError(
            f"login as {username!r} refused: "
            f"{answer.get('error_message') or ErrorCode(answer['error_code']).name}")
    return answer


def sasl_exchange(mechanism: str, username: str, password: bytes, auth_version: int,
                  ) -> Generator[SaslRequest, dict[str, Any], None]:
    """The login's requests, each answered by ``send(answer_body)`` (see the module doc)."""
    answer = yield ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism}
    if answer["error_code"]:
        raise AuthenticationError(
            f"the broker does not take {mechanism} (it offers {answer['mechanisms']})",
            ErrorCode.UNSUPPORTED_SASL_MECHANISM)
    if mechanism == PLAIN:
        answer = yield (ApiKey.SASL_AUTHENTICATE, auth_version,
                        {"auth_bytes": plain_token(username, password)})
        _accepted(answer, username)
        return
    scram = ScramClient(mechanism, username, password)
    try:
        answer = yield ApiKey.SASL_AUTHENTICATE, auth_version, {"auth_bytes": scram.first()}
        token = scram.final(bytes(_accepted(answer, username)["auth_bytes"]))
        answer = yield ApiKey.SASL_AUTHENTICATE, auth_version, {"auth_bytes": token}
        scram.verify(bytes(_accepted(answer, username)["auth_bytes"]))
    except ScramError as exc:
        raise AuthenticationError(f"login as {username!r}: {exc}") from None


def sasl_login(login: SaslCredentials, versions: dict[int, tuple[int, int]],
               ) -> Generator[SaslRequest, dict[str, Any], None]:
    """:func:`sasl_exchange` for ``login`` at the SaslAuthenticate version both sides
    serve (``versions``: the broker's ApiVersions answer); AuthenticationError
    (UNSUPPORTED_SASL_MECHANISM) when the broker serves no SaslHandshake v1 or no
    SaslAuthenticate."""
    served = versions.get(ApiKey.SASL_AUTHENTICATE)
    if served is None or versions.get(ApiKey.SASL_HANDSHAKE, (0, 0))[1] < 1:
        raise AuthenticationError("the broker does not serve SaslHandshake v1 and "
                                  "SaslAuthenticate", ErrorCode.UNSUPPORTED_SASL_MECHANISM)
    auth_version = min(served[1], APIS[ApiKey.SASL_AUTHENTICATE].max_version)
    return sasl_exchange(login.mechanism, login.username, login.password, auth_version)
