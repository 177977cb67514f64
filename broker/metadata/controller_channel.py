"""A broker's one channel to the controller quorum: each request goes to the active
controller, found and followed across leader changes (issue 34; docs/quorum_brokers.md).

The thin asyncio adapter of :class:`~broker.metadata.controller_finder.ActiveControllerFinder`
(the pure "which voter next" state machine): one :class:`~broker.async_client.AsyncConnection`
per voter, opened on first use.  :meth:`ControllerQuorumChannel.request` (the
:class:`~broker.async_client.ControllerChannel` every controller user of the broker has:
registration, heartbeats, the metadata Fetch, AlterPartition, AllocateProducerIds,
forwarded admin requests) sends to :meth:`ActiveControllerFinder.target` and reads the
outcome:

- an answer that says "not me": NOT_CONTROLLER (41) as the answer's error, or as the error
  of every entry it lists (CreateTopics' topics, ...), or for the metadata Fetch
  NOT_LEADER_OR_FOLLOWER with its ``current_leader`` hint: the finder is told (and the
  hint), and the request goes to the next voter.  Nothing was done by the voter that
  said so, so the resend is safe.  A refusal without a hint asks that voter
  DescribeQuorum (``__cluster_metadata``-0; every voter answers it, docs/quorum.md) for
  the leader and epoch it knows, so the resend goes straight to the leader;
- a connection refused or lost, or no answer within the attempt's time: the voter is
  unreachable for the finder; the request goes to the next voter.  A request lost with
  its connection may have been acted on: a resend is answered as a repeat is (a topic
  created twice: TOPIC_ALREADY_EXISTS), as for Kafka's forwarding;
- any other answer: that voter is the controller; the answer is returned.

Bounds: the request's ``timeout_ms`` is the whole budget; one attempt gets at most
``attempt_timeout_ms`` of it (a paused controller costs that, not the whole budget; a
request may ask for a smaller share: the broker's heartbeat does);
between failed rounds the finder's backoff (50 ms doubling to 1 s) is slept, never past
the deadline.  Out of budget: the last "not me" answer is returned (the caller reads its
error code) or the last error raised (retriable, as before).  With one voter (the
``host:port`` form) there is nowhere else to go: each request is one attempt, as with
one plain connection.  Connections: one per voter and channel (a handful).
:meth:`fork` makes a channel with its own connections sharing the finder (the metadata
long poll must not wait behind heartbeats on one connection).

Not thread-safe: the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from typing import Any

from broker.async_client import AsyncConnection, BrokerUnreachableError
from broker.logs.rate_limit import RateLimitedLog
from broker.metadata.controller_finder import ActiveControllerFinder
from broker.metadata.quorum_voters import VoterAddress
from broker.metadata.records import METADATA_PARTITION, METADATA_TOPIC
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, RequestTimedOutError
from timer.clock import Clock, MonotonicClock

__all__ = ["ATTEMPT_TIMEOUT_MS", "DESCRIBE_QUORUM_BODY", "ControllerQuorumChannel",
           "quorum_leader_of", "redirect_of"]

log = logging.getLogger(__name__)

ATTEMPT_TIMEOUT_MS = 5_000  # one voter's share of a request's budget (several voters)
REDIRECT_LOG_INTERVAL_MS = 10_000
DESCRIBE_TIMEOUT_MS = 1_000  # the leader question after a refusal without a hint
DESCRIBE_QUORUM_BODY = {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [
    {"partition_index": METADATA_PARTITION}]}]}


def _all_not_controller(value: Any) -> bool:
    """The answer (or an entry of it) says NOT_CONTROLLER: as its own error, or as the
    error of every entry of a list it holds."""
    if not isinstance(value, Mapping):
        return False
    if value.get("error_code") == ErrorCode.NOT_CONTROLLER:
        return True
    lists = [v for v in value.values() if isinstance(v, list) and v
             and all(isinstance(e, Mapping) for e in v)]
    return bool(lists) and all(_all_not_controller(e) for lst in lists for e in lst)


def redirect_of(api_key: int, answer: Mapping[str, Any]) -> tuple[int | None, int] | None:
    """None when ``answer`` came from the controller; else the hint it carries,
    ``(leader_id or None, leader_epoch)``."""
    if api_key == ApiKey.FETCH and not answer.get("error_code"):
        for topic in answer.get("responses") or ():
            for part in topic.get("partitions") or ():
                if part.get("error_code") == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    leader = part.get("current_leader") or {}
                    leader_id = leader.get("leader_id", -1)
                    return (leader_id if leader_id >= 0 else None,
                            leader.get("leader_epoch", -1))
        return None
    return (None, -1) if _all_not_controller(answer) else None


def quorum_leader_of(answer: Mapping[str, Any]) -> tuple[int | None, int]:
    """``(leader_id or None, leader_epoch)`` of a DescribeQuorum answer (None, -1 when it
    is refused or names no leader)."""
    if answer.get("error_code"):
        return None, -1
    for topic in answer.get("topics") or ():
        for part in topic.get("partitions") or ():
            if part.get("error_code") == 0 and part.get("leader_id", -1) >= 0:
                return part["leader_id"], part.get("leader_epoch", -1)
    return None, -1


class ControllerQuorumChannel:
    """Requests to the active controller (see the module docstring)."""

    def __init__(self, finder: ActiveControllerFinder, *, client_id: str,
                 login: tuple[str, bytes] | None = None,
                 ssl_context: ssl.SSLContext | None = None, clock: Clock | None = None,
                 attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS) -> None:
        self.finder = finder
        self.client_id = client_id
        self.login = login
        self.ssl_context = ssl_context
        self.clock = clock if clock is not None else MonotonicClock()
        self.attempt_timeout_ms = attempt_timeout_ms
        self._connections: dict[VoterAddress, AsyncConnection] = {}
        self.redirects = RateLimitedLog(log, self.clock, REDIRECT_LOG_INTERVAL_MS)

    def fork(self, client_id: str) -> ControllerQuorumChannel:
        """A channel with connections of its own, following the same finder."""
        return ControllerQuorumChannel(self.finder, client_id=client_id, login=self.login,
                                       ssl_context=self.ssl_context, clock=self.clock,
                                       attempt_timeout_ms=self.attempt_timeout_ms)

    @property
    def address(self) -> str:
        """The believed active controller's address, or the voters' (for log lines)."""
        leader = self.finder.leader
        if leader is not None:
            return leader.address
        if len(self.finder.voters) == 1:
            return self.finder.voters[0].address
        return "one of " + ",".join(v.address for v in self.finder.voters)

    def _connection(self, voter: VoterAddress) -> AsyncConnection:
        conn = self._connections.get(voter)
        if conn is None:
            conn = self._connections[voter] = AsyncConnection(
                voter.host, voter.port, client_id=self.client_id, login=self.login,
                ssl_context=self.ssl_context, clock=self.clock)
        return conn

    async def request(self, api_key: int, body: dict[str, Any], *,
                      api_version: int | None = None, timeout_ms: int = 30_000,
                      attempt_timeout_ms: int | None = None) -> dict[str, Any]:
        """``attempt_timeout_ms``: one voter's share for this request (None: the
        channel's); a heartbeat gives a silent (paused) voter less than its session."""
        finder = self.finder
        attempt_limit_ms = attempt_timeout_ms or self.attempt_timeout_ms
        single = len(finder.voters) == 1  # one attempt: nowhere else to go
        deadline_ms = self.clock.now_ms() + timeout_ms
        last_answer: dict[str, Any] | None = None
        last_error: Exception | None = None
        while not (single and (last_answer is not None or last_error is not None)):
            remaining_ms = deadline_ms - self.clock.now_ms()
            voter = finder.target()
            if voter is None:  # a whole round failed: back off within the budget
                wait_ms = finder.wait_ms()
                if wait_ms >= remaining_ms:
                    break
                await asyncio.sleep(wait_ms / 1000)
                continue
            if remaining_ms <= 0:
                break
            attempt_ms = remaining_ms if single else min(remaining_ms, attempt_limit_ms)
            try:
                answer = await self._connection(voter).request(
                    api_key, body, api_version=api_version, timeout_ms=attempt_ms)
            except (BrokerUnreachableError, RequestTimedOutError) as exc:
                finder.on_unreachable(voter)
                last_error, last_answer = exc, None
                self.redirects.info(("unreachable", voter.voter_id),
                                    "controller voter %d at %s: %s", voter.voter_id,
                                    voter.address, exc)
                continue
            hint = redirect_of(api_key, answer)
            if hint is None:
                finder.on_answered(voter)
                return answer
            finder.on_not_controller(voter, *hint)
            last_answer, last_error = answer, None
            if hint[0] is None and not single:
                await self._ask_leader(voter, deadline_ms)
            self.redirects.info(("redirect", voter.voter_id),
                                "controller voter %d at %s is not the active controller "
                                "(leader hint %s, epoch %d)", voter.voter_id,
                                voter.address, hint[0], hint[1])
        if last_answer is not None:
            return last_answer
        if last_error is not None:
            raise last_error
        raise BrokerUnreachableError(f"no active controller among {self.address} within "
                                     f"{timeout_ms} ms")

    async def _ask_leader(self, voter: VoterAddress, deadline_ms: int) -> None:
        """DescribeQuorum to ``voter``: its leader and epoch become the finder's hint."""
        timeout_ms = min(DESCRIBE_TIMEOUT_MS, deadline_ms - self.clock.now_ms())
        if timeout_ms <= 0:
            return
        try:
            answer = await self._connection(voter).request(
                ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_BODY, timeout_ms=timeout_ms)
        except MiniKafkaError:
            return  # the rotation goes on without a hint
        self.finder.on_leader_hint(*quorum_leader_of(answer))

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()

    async def aclose(self) -> None:
        for conn in list(self._connections.values()):
            await conn.aclose()
