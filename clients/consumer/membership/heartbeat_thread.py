"""The KIP-848 member's heartbeat thread: ConsumerGroupHeartbeat on its own connection.

The thread asks the member's state machine (:class:`~clients.consumer.membership.member.
ConsumerMembership`, under :class:`~clients.consumer.coordinator_channel.GroupShared`'s
lock) for the next heartbeat, sends it to the coordinator the poll thread discovered
(``GroupShared.coordinator``) and feeds the answer back; it never runs user code (the
poll thread runs the revoke / assign / lose steps).  After each answer it publishes the
membership for the poll thread's commits: ``GroupShared.generation_id`` is the member
epoch (OffsetCommit v9 carries it as ``generation_id``), ``member_id`` the member's id,
``incarnation`` its count of (re)joins (a commit answered STALE_MEMBER_EPOCH is retried
only by the same membership, :mod:`clients.consumer.stale_epoch`), and a fatal error as
``GroupShared.fatal`` (raised by the next poll).  When the state
machine says the coordinator is lost (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, no
answer) the thread forgets it; the poll thread finds it again.

Costs: one small request per ``heartbeat_interval_ms`` (the broker's
``group.consumer.heartbeat.interval.ms``, 5 s in Kafka), one at once per join,
acknowledgement and leave.  Thread safety: the membership and the shared fields are
touched only under the lock; the connection is the thread's own.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from typing import Any

from clients.consumer.coordinator_channel import GroupShared
from clients.consumer.membership.member import ConsumerMembership, MembershipState
from clients.network.connection import BrokerConnection
from clients.network.sasl import SaslLogin
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError, error_for

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05  # how often an idle thread looks for work (a join, a step done)


class MembershipHeartbeat:
    def __init__(self, shared: GroupShared, membership: ConsumerMembership, *,
                 client_id: str, sasl: SaslLogin | None, ssl_context: ssl.SSLContext | None,
                 request_timeout_ms: int, clock: Callable[[], float]) -> None:
        self.shared = shared
        self.membership = membership
        self.client_id = client_id
        self.sasl = sasl
        self.ssl_context = ssl_context
        self.request_timeout_ms = request_timeout_ms
        self.clock = clock
        self.wake = threading.Event()  # set by the poll thread when it changed something
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: BrokerConnection | None = None
        self._conn_for: tuple[int, str, int] | None = None
        self.sent = 0  # heartbeats sent (tests and stats)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"heartbeat-{self.membership.config.group_id}",
                daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.request_timeout_ms / 1000 + 5)
            self._thread = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wait_s = self.step()
            except Exception:  # never let the thread die silently
                log.exception("group %s: heartbeat step failed", self.membership.config.group_id)
                wait_s = IDLE_WAIT_S
            self.wake.wait(wait_s)
            self.wake.clear()

    def step(self) -> float:
        """Send one heartbeat if one is due; returns how long to wait before the next look."""
        with self.shared.lock:
            coordinator = self.shared.coordinator
            if coordinator is None:
                return IDLE_WAIT_S
            now_ms = self.now_ms()
            body = self.membership.heartbeat(now_ms)
            if body is None:
                timeout = self.membership.timeout_ms(now_ms)
                return IDLE_WAIT_S if timeout is None else min(timeout / 1000, 1.0)
        answer = self._send(coordinator, body)
        with self.shared.lock:
            if answer is None:
                self.membership.on_failure(self.now_ms())
            else:
                self.membership.on_response(answer, self.now_ms())
            self._publish(coordinator)
        return 0.0

    def _send(self, coordinator: tuple[int, str, int],
              body: dict[str, Any]) -> dict[str, Any] | None:
        if self._conn is None or self._conn_for != coordinator:
            if self._conn is not None:
                self._conn.close()
            self._conn = BrokerConnection(
                coordinator[1], coordinator[2], node_id=coordinator[0],
                client_id=self.client_id, request_timeout_ms=self.request_timeout_ms,
                sasl=self.sasl, ssl_context=self.ssl_context)
            self._conn_for = coordinator
        try:
            answer = self._conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, body,
                                        timeout_ms=self.request_timeout_ms)
        except MiniKafkaError as e:
            log.info("group %s: heartbeat to %s failed: %s", body["group_id"], coordinator, e)
            self._conn.close()
            self._conn = None
            return None
        self.sent += 1
        return dict(answer)

    def _publish(self, coordinator: tuple[int, str, int]) -> None:
        """Caller holds the lock."""
        m, s = self.membership, self.shared
        if m.coordinator_lost:
            m.coordinator_lost = False
            if s.coordinator == coordinator:
                s.coordinator = None
        s.member_id = m.config.member_id
        s.generation_id = m.member_epoch if m.member_epoch > 0 else -1
        s.incarnation = m.incarnation
        if m.state is MembershipState.FATAL and m.fatal_error is not None and s.fatal is None:
            code, message = m.fatal_error
            s.fatal = error_for(code, f"group {m.config.group_id!r}: {message}")
