"""The consumer's heartbeat thread: keeps a SYNCING or STABLE member alive between polls.

Every ``heartbeat_interval_ms`` while the member is SYNCING or STABLE (as Kafka, which
heartbeats in CompletingRebalance: a leader's metadata refresh and assignor run
between its JoinGroup answer and its SyncGroup, and must not cost it its session) it
sends Heartbeat
``{group_id, generation_id, member_id, group_instance_id}`` on its *own* connection to
the coordinator (so a slow poll thread or a long JoinGroup never delays it), and applies
the answer to :class:`~clients.consumer.coordinator_channel.GroupShared` only if the generation
and member id are still those it sent (a rebalance may have moved on meanwhile):

| answer                         | effect                                              |
|--------------------------------|-----------------------------------------------------|
| NONE                           | next heartbeat after the interval                   |
| REBALANCE_IN_PROGRESS          | rejoin needed (the next poll joins)                 |
| ILLEGAL_GENERATION             | generation forgotten, member id kept, rejoin        |
| UNKNOWN_MEMBER_ID              | member id and generation forgotten, rejoin          |
| NOT_COORDINATOR, COORDINATOR_  | coordinator forgotten (the poll thread rediscovers  |
| NOT_AVAILABLE, lost connection | it; heartbeats resume against the new one)          |
| FENCED_INSTANCE_ID             | fatal: raised by the next poll                      |

Poll-interval check: when ``poll`` was not called for ``max_poll_interval_ms`` the member
is considered stuck: a dynamic member sends LeaveGroup (its partitions go to the others
at once) and forgets its member id; a static member just stops heartbeating and is
removed after the session timeout.  The next poll rejoins.

Costs: one small request per interval.  Thread safety: the thread touches only the
shared fields (under their lock) and its own connection; ``stop`` joins it.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from typing import cast

from clients.consumer.coordinator_channel import GroupShared, MemberState
from clients.consumer.group_requests import leave_group_request
from clients.network.connection import BrokerConnection
from clients.network.sasl import SaslLogin
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from clients.protocol.message_types import HeartbeatRequest, HeartbeatResponse

log = logging.getLogger(__name__)


class HeartbeatThread:
    def __init__(
        self,
        shared: GroupShared,
        *,
        group_id: str,
        group_instance_id: str | None,
        client_id: str,
        sasl: SaslLogin | None = None,
        ssl_context: ssl.SSLContext | None = None,
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        max_poll_interval_ms: int,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        clock: Callable[[], float],
    ) -> None:
        self.shared = shared
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.sasl = sasl
        self.ssl_context = ssl_context
        self.interval_s = heartbeat_interval_ms / 1000
        self.timeout_ms = min(request_timeout_ms, session_timeout_ms)
        self.max_poll_interval_s = max_poll_interval_ms / 1000
        self.backoff_s = retry_backoff_ms / 1000
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: BrokerConnection | None = None
        self._conn_for: tuple[int, str, int] | None = None
        self._next = 0.0
        self.sent = 0  # heartbeats sent (tests and stats)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.group_id}",
                                            daemon=True)
            self._thread.start()

    def reset(self) -> None:
        """A generation just started: first heartbeat one interval from now."""
        self._next = self.clock() + self.interval_s

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_ms / 1000 + 5)
            self._thread = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            try:
                wait = self._step()
            except Exception:  # never let the thread die silently: keep heartbeating
                log.exception("group %s: heartbeat step failed", self.group_id)
                wait = self.backoff_s

    def _step(self) -> float:
        """One iteration; returns how long to sleep."""
        with self.shared.lock:
            s = self.shared
            state, coordinator = s.state, s.coordinator
            generation, member_id, last_poll = s.generation_id, s.member_id, s.last_poll
        if state not in (MemberState.SYNCING, MemberState.STABLE) or coordinator is None:
            return self.backoff_s
        now = self.clock()
        if now - last_poll > self.max_poll_interval_s:
            self._poll_timeout(coordinator, generation, member_id)
            return self.backoff_s
        if now < self._next:
            return min(self._next - now, self.backoff_s * 5)
        code = self._heartbeat(coordinator, generation, member_id)
        self._next = self.clock() + (self.interval_s if code != -1 else self.backoff_s)
        with self.shared.lock:
            s = self.shared
            if (s.generation_id, s.member_id) != (generation, member_id):
                return 0.0  # a rebalance moved on while we waited: stale answer
            if code == -1 or code in (ErrorCode.NOT_COORDINATOR,
                                      ErrorCode.COORDINATOR_NOT_AVAILABLE):
                if s.coordinator == coordinator:
                    s.coordinator = None
            elif code == ErrorCode.REBALANCE_IN_PROGRESS:
                s.rejoin_needed = True
            elif code == ErrorCode.ILLEGAL_GENERATION:
                s.reset_member(keep_member_id=True)
            elif code == ErrorCode.UNKNOWN_MEMBER_ID:
                s.reset_member()
            elif code == ErrorCode.FENCED_INSTANCE_ID:
                s.fatal = error_for(code, f"group {self.group_id!r}: instance id "
                                          f"{self.group_instance_id!r} is used by another member")
        return max(0.0, self._next - self.clock())

    def _connection(self, coordinator: tuple[int, str, int]) -> BrokerConnection:
        if self._conn is None or self._conn_for != coordinator:
            if self._conn is not None:
                self._conn.close()
            self._conn = BrokerConnection(coordinator[1], coordinator[2],
                                          node_id=coordinator[0], client_id=self.client_id,
                                          request_timeout_ms=self.timeout_ms,
                                          sasl=self.sasl,
                                          ssl_context=self.ssl_context)  # fmt: skip
            self._conn_for = coordinator
        return self._conn

    def _heartbeat(self, coordinator: tuple[int, str, int], generation: int,
                   member_id: str) -> int:
        """The answer's error code, -1 when the coordinator could not be reached."""
        body: HeartbeatRequest = {"group_id": self.group_id, "generation_id": generation,
                                  "member_id": member_id,
                                  "group_instance_id": self.group_instance_id}
        conn = self._connection(coordinator)
        try:
            answer = cast(HeartbeatResponse,
                          conn.request(ApiKey.HEARTBEAT, body, timeout_ms=self.timeout_ms))
        except MiniKafkaError as e:
            log.info("group %s: heartbeat to %s failed: %s", self.group_id, coordinator, e)
            conn.close()
            return -1
        self.sent += 1
        code = int(answer["error_code"])
        if code != ErrorCode.NONE:
            log.info("group %s: heartbeat answered %s", self.group_id, ErrorCode(code).name
                     if code in ErrorCode._value2member_map_ else code)
        return code

    def _poll_timeout(self, coordinator: tuple[int, str, int], generation: int,
                      member_id: str) -> None:
        log.warning("group %s: poll not called for more than %.1f s, leaving the group",
                    self.group_id, self.max_poll_interval_s)
        if self.group_instance_id is None:
            group_id = self.group_id
            why = "consumer poll timeout has expired"
            try:
                self._connection(coordinator).request(
                    ApiKey.LEAVE_GROUP,
                    lambda v: leave_group_request(group_id, member_id, None, v, why),
                    timeout_ms=self.timeout_ms)  # fmt: skip
            except MiniKafkaError as e:
                log.info("group %s: LeaveGroup failed: %s", self.group_id, e)
        with self.shared.lock:
            s = self.shared
            if (s.generation_id, s.member_id) == (generation, member_id):
                s.reset_member(keep_member_id=self.group_instance_id is not None)
