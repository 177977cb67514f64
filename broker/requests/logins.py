"""Who is logged in on each connection of the main process, and failed logins' answers.

:class:`ConnectionLogins` keeps, per connection (``(network process index, conn_id)``):
the SASL session (:class:`~broker.auth.SaslSession`), the peer address the network
process sent (PEER, before the first request: failed logins are counted per address,
:mod:`broker.login_failures`) and, on the internal listener with a cluster secret, the
time by which the connection must have logged in as a broker (``request_read_timeout_ms``
after its first request: a place there held by a stranger is closed).

Logins come first: on a port that requires one (the client port with
``client_auth_required``, the internal listener with a cluster secret) a request other
than ApiVersions or the SASL exchange from a connection not logged in closes it, before
anything else about the request is looked at (:meth:`ConnectionLogins.login_first`).
A SaslAuthenticate that fails is answered ``connection_failed_authentication_delay_ms``
later (a timer on the loop: nothing waits, and the connection, muted meanwhile, sends
nothing else) and its connection is then closed, Kafka's way.  At most
``max_delayed_authentication_failures`` answers wait at once, and at most half of
``queued_max_requests`` (each holds one of a network process's places for requests
with the main process); beyond that a failure is answered and closed at once.

Costs: O(1) per request and per connection event; memory O(connections).  Not
thread-safe: the main event loop owns it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from broker.auth import SaslSession, needs_login
from broker.config import BrokerConfig
from broker.login_failures import LoginFailureLimits, LoginFailures
from broker.network.channel.codec import is_internal_connection
from broker.network.channel.main_side import MainChannelEndpoint
from broker.users import ScramUsers
from clients.protocol.api_keys import ApiKey, api_name
from clients.protocol.codec import Request
from timer.clock import Clock

log = logging.getLogger(__name__)

ConnKey = tuple[int, int]  # (network process index, conn_id)


class ConnectionLogins:
    """The login state of the main process's connections (see the module docstring).

    ``cluster_secret`` (brokers' logins on the internal listener; empty: none),
    ``users`` (SCRAM users of the client port) and ``decoy_key`` (SCRAM answers for
    unknown users) come from the broker's core, which reads them at start-up.
    """

    def __init__(self, config: BrokerConfig, clock: Clock, *, cluster_secret: str,
                 users: ScramUsers, decoy_key: bytes) -> None:
        self.config = config
        self.cluster_secret = cluster_secret
        self.users = users
        self.decoy_key = decoy_key
        self.failures = LoginFailures(LoginFailureLimits.of(config), clock)
        self.sessions: dict[ConnKey, SaslSession] = {}
        self.peers: dict[ConnKey, str] = {}  # peer address of each connection
        # internal-listener connections not logged in yet -> when they must have
        # (monotonic s)
        self._deadlines: dict[ConnKey, float] = {}
        # failed logins waiting to be answered (bounded); warned that it is full
        self._delayed_answers: set[asyncio.TimerHandle] = set()
        self._delays_full = False

    def on_peer(self, key: ConnKey, address: str) -> None:
        self.peers[key] = address

    def forget(self, key: ConnKey) -> None:
        """The connection is gone (CLOSED, or its network process died)."""
        self.sessions.pop(key, None)
        self._deadlines.pop(key, None)
        self.peers.pop(key, None)

    def session(self, key: ConnKey) -> SaslSession | None:
        return self.sessions.get(key)

    def login_first(self, endpoint: MainChannelEndpoint, conn_id: int, api_key: int) -> bool:
        """Whether ``conn_id`` may be served ``api_key`` now; when it may not (no login
        where one is required) its connection is closed here.  The first request of a
        broker-only connection starts its login deadline."""
        key = (endpoint.index, conn_id)
        session = self.sessions.get(key)
        # the internal listener is for the cluster's brokers: with a secret, nothing but
        # a broker login is served there until one succeeds (users cannot log in there)
        internal = is_internal_connection(conn_id)
        if internal and self.cluster_secret and (session is None or session.principal is None):
            self._deadlines.setdefault(
                key, time.monotonic() + self.config.request_read_timeout_ms / 1000)
        if needs_login(bool(self.cluster_secret) if internal
                       else self.config.client_auth_required, session, api_key):
            log.warning("closing connection %d.%d: %s before logging in (%s)",
                        endpoint.index, conn_id, api_name(api_key),
                        "internal listener" if internal else "client_auth_required")
            endpoint.send_close(conn_id)
            return False
        return True

    def authenticate(self, endpoint: MainChannelEndpoint, conn_id: int, request: Request,
                     version: int, respond: Callable[[dict[str, Any] | None], None]) -> None:
        """Answer a SaslHandshake or SaslAuthenticate (a failed login: later, then the
        connection is closed)."""
        key = (endpoint.index, conn_id)
        internal = is_internal_connection(conn_id)
        session = self.sessions.get(key)
        if session is None:
            session = self.sessions[key] = SaslSession(
                self.cluster_secret, None if internal else self.users,
                plain=bool(self.config.ssl_certfile) and not internal,
                decoy_key=self.decoy_key, failures=self.failures,
                address=self.peers.get(key, ""))
        had_failed = session.failed
        answer = (session.handshake(request.body, version)
                  if request.api_key == ApiKey.SASL_HANDSHAKE
                  else session.authenticate(request.body))
        if session.failed and not had_failed:
            self._answer_failed_login(endpoint, conn_id, session, lambda: respond(answer))
            return
        respond(answer)
        if session.principal is not None:
            self._deadlines.pop(key, None)

    def _answer_failed_login(self, endpoint: MainChannelEndpoint, conn_id: int,
                             session: SaslSession, answer: Callable[[], None]) -> None:
        """Answer a failed login ``connection_failed_authentication_delay_ms`` from now,
        then close its connection (at once when that many answers wait already)."""
        config = self.config
        log.log(logging.DEBUG if session.locked_out else logging.INFO,
                "connection %d.%d from %s: failed login %s; closing it", endpoint.index,
                conn_id, session.address or "?", session.failure)
        delay_ms = config.connection_failed_authentication_delay_ms
        waiting = self._delayed_answers
        most = min(config.max_delayed_authentication_failures, config.queued_max_requests // 2)
        if delay_ms == 0 or len(waiting) >= most:
            if delay_ms and not self._delays_full:
                log.warning("%d failed logins wait for their answer "
                            "(max_delayed_authentication_failures): more are answered at "
                            "once until fewer wait", len(waiting))
                self._delays_full = True
            answer()
            endpoint.send_close(conn_id)
            return
        key = (endpoint.index, conn_id)

        def late() -> None:
            waiting.discard(handle)
            self._delays_full = self._delays_full and bool(waiting)
            if self.sessions.get(key) is session:  # else the connection is gone already
                answer()
                endpoint.send_close(conn_id)

        handle = asyncio.get_running_loop().call_later(delay_ms / 1000, late)
        waiting.add(handle)

    def late_logins(self) -> list[ConnKey]:
        """Internal-listener connections that did not log in in time (forgotten here:
        the caller closes them)."""
        now = time.monotonic()
        late = [key for key, deadline in self._deadlines.items() if deadline <= now]
        for key in late:
            del self._deadlines[key]
        return late

    def close(self) -> None:
        """Drop the failed logins still waiting for their answer (the loop is ending)."""
        for handle in self._delayed_answers:
            handle.cancel()
        self._delayed_answers.clear()
