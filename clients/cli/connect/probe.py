"""The first contact of a ``minikafka`` client command: one connection to a bootstrap
broker before the command runs, so that what only a setting can fix is said at once.

Kafka's clients, meeting a listener that wants TLS or a SASL login they did not
configure, see the connection closed (during ApiVersions on a TLS port, at the first
request after it on a SASL port: Kafka's SASL listener rule) and report a network
error, or retry until a timeout (the producer's metadata wait).  :func:`check_access`
connects once, with the command's settings, to the first bootstrap address that
accepts a TCP connection, and tells apart:

* a refused login or certificate (:class:`~clients.protocol.errors.AuthenticationError`):
  that error, as a :class:`~clients.cli.common.CliError`;
* no TLS configured, the version handshake failed, and the port completes a TLS
  handshake (not verified: nothing secret is sent): the listener wants TLS; a
  plaintext Metadata request inside that TLS session, closed unanswered, shows it also
  wants a login -> "the broker at HOST:PORT requires TLS (and a SASL login): pass
  --command-config with security.protocol=SSL|SASL_SSL ...";
* no login configured, ApiVersions answered, Metadata closed unanswered: the listener
  wants a login -> "... requires a SASL login: ... security.protocol=SASL_PLAINTEXT
  (SASL_SSL with TLS) ...".

Anything else (no address reachable, a timeout, a broker error) is left to the command,
which reports it as before.  Passwords are never shown: the hints name settings only.

Costs: one extra connection per command (TCP, TLS and the SASL exchange when
configured, ApiVersions, one Metadata for no topic), plus a second TLS handshake and
Metadata only on the failure paths; each step bounded by ``timeout_ms`` (5 s).
Thread safety: one thread.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from typing import Any

from clients.cli.common import CliError
from clients.network.cluster_metadata import parse_bootstrap
from clients.network.connection import BrokerConnection
from clients.network.node_connections import metadata_request
from clients.network.sasl import SaslLogin, sasl_login_of
from clients.network.tls import ssl_context_of
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import AuthenticationError, ErrorCode, MiniKafkaError

__all__ = ["check_access"]

PROBE_TIMEOUT_MS = 5_000
_LOGIN = "sasl.mechanism=SCRAM-SHA-256, sasl.username and sasl.password"


def check_access(bootstrap: str, settings: Mapping[str, Any],
                 timeout_ms: int = PROBE_TIMEOUT_MS) -> None:
    """Raise CliError when the first reachable bootstrap broker refuses these settings
    for a reason a setting fixes (module docstring); else return."""
    protocol = str(settings.get("security_protocol", "PLAINTEXT"))
    sasl = sasl_login_of(protocol, settings.get("sasl_mechanism"),
                         settings.get("sasl_plain_username"),
                         settings.get("sasl_plain_password"))
    tls = ssl_context_of(protocol, settings.get("ssl_cafile"), settings.get("ssl_certfile"),
                         settings.get("ssl_keyfile"), settings.get("ssl_password"),
                         settings.get("ssl_check_hostname", True), None)
    for host, port in parse_bootstrap(bootstrap):
        try:
            socket.create_connection((host, port), timeout=timeout_ms / 1000).close()
        except OSError:
            continue  # the command tries the others and reports what it finds
        problem = _probe(host, port, sasl, tls, timeout_ms)
        if problem is not None:
            raise CliError(problem)
        return


def _connection(host: str, port: int, sasl: SaslLogin | None,
                tls: ssl.SSLContext | None, timeout_ms: int) -> BrokerConnection:
    return BrokerConnection(host, port, client_id="minikafka-cli", sasl=sasl,
                            ssl_context=tls, request_timeout_ms=timeout_ms,
                            connect_timeout_ms=timeout_ms)


def _probe(host: str, port: int, sasl: SaslLogin | None, tls: ssl.SSLContext | None,
           timeout_ms: int) -> str | None:
    """What to tell the user about this broker, or None."""
    where = f"{host}:{port}"
    conn = _connection(host, port, sasl, tls, timeout_ms)
    try:
        try:
            conn.connect()
        except AuthenticationError as exc:
            return f"{exc} (the broker at {where})"
        except (OSError, MiniKafkaError):
            if tls is not None or not _speaks_tls(host, port, timeout_ms):
                return None
            login = sasl is not None or _closes_before_login(host, port, _unverified(),
                                                             timeout_ms)
            if login:
                return (f"the broker at {where} requires TLS and a SASL login: pass "
                        "--command-config FILE with security.protocol=SASL_SSL, "
                        f"ssl.ca.location, {_LOGIN}")
            return (f"the broker at {where} requires TLS: pass --command-config FILE with "
                    "security.protocol=SSL and ssl.ca.location")
        if sasl is None and _closed(conn, timeout_ms):
            protocol = "SASL_SSL" if tls is not None else "SASL_PLAINTEXT"
            return (f"the broker at {where} requires a SASL login (it closed the connection "
                    f"at the first request after ApiVersions): pass --command-config FILE "
                    f"with security.protocol={protocol}, {_LOGIN}")
        return None
    finally:
        conn.close()


def _closed(conn: BrokerConnection, timeout_ms: int) -> bool:
    """Whether a Metadata request (no topics) on ``conn`` is closed unanswered."""
    try:
        conn.request(ApiKey.METADATA, lambda v: metadata_request([], v, False),
                     timeout_ms=timeout_ms)
    except MiniKafkaError as exc:
        return exc.code == ErrorCode.NETWORK_EXCEPTION
    except OSError:
        return True
    return False


def _closes_before_login(host: str, port: int, tls: ssl.SSLContext, timeout_ms: int) -> bool:
    conn = _connection(host, port, None, tls, timeout_ms)
    try:
        conn.connect()
        return _closed(conn, timeout_ms)
    except (OSError, MiniKafkaError):
        return False
    finally:
        conn.close()


def _unverified() -> ssl.SSLContext:
    """A context that accepts any certificate: only to learn whether a port speaks TLS
    and wants a login (no setting or secret is sent with it)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _speaks_tls(host: str, port: int, timeout_ms: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_ms / 1000) as sock, \
                _unverified().wrap_socket(sock, server_hostname=host):
            return True
    except (OSError, ValueError):
        return False
