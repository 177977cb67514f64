"""The consumer's link to its group coordinator: discovery, a dedicated connection, state
shared with the heartbeat thread, and the group configuration (:class:`GroupConfig`,
validated on construction: positive timeouts, heartbeat below the session timeout).

Discovery: FindCoordinator for the group (key_type 0; ``key`` before v4, a one-key
``coordinator_keys`` batch from v4, read by :mod:`clients.consumer.group_requests`) to
the least loaded broker.
COORDINATOR_NOT_AVAILABLE (e.g. ``__consumer_offsets`` is still being created),
COORDINATOR_LOAD_IN_PROGRESS and transport errors are retried after
``retry_backoff_ms`` until the caller's deadline; other errors raise.  NOT_COORDINATOR
or a lost connection anywhere make the owner call :meth:`CoordinatorChannel.dead`,
which forgets the coordinator and closes the connection (its in-flight requests come
back failed through ``on_response``), so the next :meth:`ensure` rediscovers it.

The connection is separate from the consumer's fetch connections (Kafka does the same):
a JoinGroup may wait for the whole rebalance timeout, and a broker answers the requests
of one connection in order.  ``epoch`` counts replaced connections so the owner can tell
that a request it waits for was lost with the old one.

Costs: one round trip per discovery.  Thread safety: the channel belongs to the
consumer's poll thread; only :class:`GroupShared` (behind its ``lock``) is also read and
written by the heartbeat thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from clients.consumer.assignors import Assignor
from clients.consumer.group_requests import find_coordinator_request, read_find_coordinator
from clients.network.connection import Body, BrokerConnection
from clients.network.node_connections import NodeConnections
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    InvalidConfigError,
    MiniKafkaError,
    RequestTimedOutError,
    error_for,
)
from clients.protocol.request_channel import ClientResponse, InFlightRequest

log = logging.getLogger(__name__)


@dataclass
class GroupConfig:
    group_id: str
    assignors: list[Assignor]
    group_instance_id: str | None = None
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 300_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    max_in_flight: int = 8

    def __post_init__(self) -> None:
        if not isinstance(self.group_id, str) or not self.group_id:
            raise InvalidConfigError(f"group_id must be a non-empty str, got {self.group_id!r}")
        if not self.assignors:
            raise InvalidConfigError("partition_assignment_strategy must name an assignor")
        for name in ("session_timeout_ms", "rebalance_timeout_ms", "heartbeat_interval_ms",
                     "max_poll_interval_ms", "auto_commit_interval_ms", "request_timeout_ms",
                     "max_in_flight"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidConfigError(f"{name} must be an int > 0, got {value!r}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidConfigError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )

    @property
    def protocol(self) -> str:
        cooperative = all(a.rebalance_protocol == "cooperative" for a in self.assignors)
        return "cooperative" if cooperative else "eager"


class MemberState(Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"


@dataclass
class GroupShared:
    """Membership fields both threads use; read and write them only under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    state: MemberState = MemberState.UNJOINED
    coordinator: tuple[int, str, int] | None = None  # node id, host, port
    generation_id: int = -1
    member_id: str = ""
    incarnation: int = 0  # KIP-848: the member's (re)joins (clients.consumer.stale_epoch)
    rejoin_needed: bool = True
    last_poll: float = 0.0
    fatal: MiniKafkaError | None = None  # raised by the next poll

    def reset_member(self, keep_member_id: bool = False) -> None:
        """Forget the generation (and the member id unless kept); caller holds ``lock``."""
        self.generation_id = -1
        if not keep_member_id:
            self.member_id = ""
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True


class CoordinatorChannel:
    def __init__(
        self,
        group_id: str,
        net: NodeConnections,
        shared: GroupShared,
        *,
        client_id: str,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        max_in_flight: int,
        on_response: Callable[[ClientResponse], None],
        clock: Callable[[], float],
    ) -> None:
        self.group_id = group_id
        self._net = net
        self.shared = shared
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_in_flight = max_in_flight
        self._on_response = on_response
        self.clock = clock
        self.conn: BrokerConnection | None = None
        self._conn_for: tuple[int, str, int] | None = None
        self.epoch = 0

    def ensure(self, deadline: float) -> BrokerConnection | None:
        """The connection to the coordinator, discovering it (None at the deadline)."""
        while True:
            with self.shared.lock:
                known = self.shared.coordinator
            if known is not None:
                if self.conn is None or self._conn_for != known:
                    self.close()
                    self.conn = BrokerConnection(
                        known[1], known[2], node_id=known[0], client_id=self.client_id,
                        request_timeout_ms=self.request_timeout_ms,
                        max_in_flight=self.max_in_flight, sasl=self._net.sasl,
                        ssl_context=self._net.ssl_context,
                    )  # fmt: skip
                    self._conn_for = known
                try:
                    self.conn.connect()
                    return self.conn
                except MiniKafkaError as e:
                    self.dead(f"connect failed: {e.message}")
            if self.clock() >= deadline:
                return None
            self._find(deadline)

    def _find(self, deadline: float) -> None:
        group_id = self.group_id
        try:
            version, body = self._net.request_with_version(
                None, ApiKey.FIND_COORDINATOR,
                lambda v: find_coordinator_request(group_id, v),
                max(1.0, self.remaining_ms(deadline)))  # fmt: skip
        except MiniKafkaError as e:
            if not e.retriable:
                raise
            self.backoff(deadline)
            return
        found = read_find_coordinator(body, version, group_id)
        if found.error_code == 0:
            with self.shared.lock:
                self.shared.coordinator = (found.node_id, found.host, found.port)
            return
        error = error_for(found.error_code, found.error_message or "FindCoordinator")
        if not error.retriable:
            raise error
        self.backoff(deadline)

    def dead(self, why: str) -> None:
        """Forget the coordinator (rediscover on the next :meth:`ensure`)."""
        with self.shared.lock:
            if self.shared.coordinator is not None:
                log.info("group %s: coordinator %s unusable (%s), rediscovering",
                         self.group_id, self.shared.coordinator, why)
            self.shared.coordinator = None
        self.close()

    def close(self) -> None:
        conn, self.conn, self._conn_for = self.conn, None, None
        if conn is not None:
            self.epoch += 1
            for response in conn.close():
                self._on_response(response)

    def send(self, api: ApiKey, body: Body, timeout_ms: float) -> InFlightRequest | None:
        """Send on the current connection (None, coordinator forgotten, if that fails)."""
        conn = self.conn
        if conn is None:
            return None
        try:
            return conn.send(api, body, timeout_ms=max(1, int(timeout_ms)))
        except MiniKafkaError as e:
            self.dead(f"{api.name} send failed: {e.message}")
            return None

    def wait_for(self, request: InFlightRequest, deadline: float) -> ClientResponse | None:
        """``request``'s response (others go to ``on_response`` meanwhile); None at the
        deadline; a failed response if the connection was replaced or lost."""
        conn = self.conn
        while conn is not None and self.conn is conn:
            for response in conn.poll(self.remaining_ms(deadline)):
                if response.request is request:
                    if response.error is not None:
                        self.dead(response.error.message)
                    return response
                self._on_response(response)
            if self.clock() >= deadline:
                return None
        return ClientResponse(request, None, RequestTimedOutError("coordinator connection lost"))

    def request(self, api: ApiKey, body: Body, deadline: float) -> ClientResponse | None:
        """Discover, send, wait: a response (maybe failed), or None at the deadline."""
        conn = self.ensure(deadline)
        if conn is None:
            return None
        # the request may outlive the caller's wait (its late answer goes to on_response):
        # a short wait must not time the request out, which would close the connection
        sent = self.send(api, body, self.request_timeout_ms)
        return None if sent is None else self.wait_for(sent, deadline)

    def drain(self, timeout_ms: float) -> None:
        """Hand responses that arrive within ``timeout_ms`` to ``on_response``."""
        if self.conn is not None and self.conn.in_flight_count:
            for response in self.conn.poll(timeout_ms):
                self._on_response(response)

    def remaining_ms(self, deadline: float, cap: float | None = None) -> float:
        remaining = max(0.0, (deadline - self.clock()) * 1000)
        return remaining if cap is None else min(remaining, cap)

    def backoff(self, deadline: float) -> None:
        """Sleep ``retry_backoff_ms`` (less if the deadline is nearer)."""
        time.sleep(min(self.retry_backoff_ms, self.remaining_ms(deadline)) / 1000)
