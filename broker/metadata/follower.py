"""A broker's link to the controller: registration, heartbeats, metadata pulled as a log.

Three asyncio loops on the broker's event loop (docs/replication.md):

- **registration**: BrokerRegistration (v0) with a fresh incarnation id (a random UUID)
  per process start and per re-registration, the advertised listener (named by its
  protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``), every log it
  holds (:mod:`broker.metadata.replica_logs`) and the feature
  :data:`~broker.metadata.records.METADATA_VERSION_FEATURE` (the metadata record versions
  this broker applies); the answer's ``broker_epoch`` goes into
  every heartbeat and AlterPartition.  A STALE_BROKER_EPOCH (or similar) answer to a
  heartbeat re-registers.
- **heartbeats** every ``broker_heartbeat_interval_ms`` with the metadata offset applied
  so far, and one at once when the image first caught up (below: the controller
  unfences the broker on it, a heartbeat interval sooner); ``want_shut_down`` during
  a controlled shutdown until the controller answers ``should_shut_down`` (it has
  moved this broker's leaderships away).  Each voter gets at most a third of the
  session timeout of a heartbeat's budget (:func:`heartbeat_attempt_timeout_ms`): a
  paused (SIGSTOPped) active controller must not hold the heartbeats until a newly
  elected one has fenced the broker (its sessions start at its activation).
- **metadata fetch**: a long-poll Fetch (our highest version, 12; sessionless) of
  ``__cluster_metadata``-0 from the active controller at ``last_applied_offset + 1``; each
  answer goes to the sans-IO :class:`~broker.metadata.log_reader.MetadataLogReader`
  (its rules: records in order and contiguous, the image rebuilt from empty after
  OFFSET_OUT_OF_RANGE), and the broker's ``reconcile`` (:class:`ImageHost`) acts on the
  image only once it has reached the log's high watermark: a broker catching up over
  several answers never deletes or creates replicas from a partial image.

**Initial catch-up** (Kafka's ``initialCatchUpFuture``): :attr:`MetadataFollower.caught_up`
is set once the image holds the record of this broker's registration (its offset is the
broker epoch the registration answered, the offset the controller also unfences it at)
and was acted on (reconciled at the log's high watermark).  The server enables its
listeners only then (docs/broker.md): until then clients would be answered from an
empty or stale image.  It stays set for the life of the process (a later
re-registration does not stop serving, as in Kafka).

The controller is a quorum of voters: every request goes through a
:class:`~broker.metadata.controller_channel.ControllerQuorumChannel`, which finds the
active one and follows leader changes (NOT_CONTROLLER, NOT_LEADER_OR_FOLLOWER with its
``current_leader`` hint, a voter lost).  Errors talking to the controller back off and
retry (their log lines rate-limited); once serving, the broker keeps serving with the
metadata it has (a fenced broker's partitions are led elsewhere by then).
Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from broker.async_client import ControllerChannel
from broker.logs.rate_limit import RateLimitedLog
from broker.metadata.log_reader import MetadataLogReader
from broker.metadata.records import (
    INTERNAL_LISTENER,
    METADATA_PARTITION,
    METADATA_TOPIC,
    METADATA_VERSION,
    METADATA_VERSION_FEATURE,
)
from broker.metadata.replica_logs import replica_log_reports
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from timer.clock import MonotonicClock

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.metadata.image import MetadataImage
    from broker.replica.recovery_marks import RecoveryMarks
    from storage.log_manager import LogManager

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
UNREACHABLE_LOG_INTERVAL_MS = 30_000  # a controller that stays away: a line this often
METADATA_MAX_WAIT_MS = 500
# Kafka's SecurityProtocol ids, by the name a listener of that protocol has
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def heartbeat_attempt_timeout_ms(config: BrokerConfig) -> int:
    """One voter's share of a heartbeat: a third of the session timeout, at least the
    heartbeat interval (3 s / 500 ms: 1 s), so a silent voter costs a third of it."""
    return max(config.broker_heartbeat_interval_ms, config.broker_session_timeout_ms // 3)


class ImageHost(Protocol):
    """What the follower needs of the broker it follows for (:class:`broker.core.BrokerCore`
    implements it): its config and login secret, the logs and recovery cuts it reports at
    registration, and the image it installs and has the broker act on."""

    config: BrokerConfig
    cluster_secret: str
    log_manager: LogManager
    recovery: RecoveryMarks
    image: MetadataImage | None

    async def prepare_logs(self) -> None: ...

    def reconcile(self) -> None: ...


class MetadataFollower:
    def __init__(self, core: ImageHost, controller: ControllerChannel,
                 metadata_conn: ControllerChannel) -> None:
        """``controller``: registration and heartbeats; ``metadata_conn``: the metadata
        long poll.  The controller answers one connection's requests in order, so the
        long poll gets a channel of its own (it never delays heartbeats); both follow the
        same active controller (:meth:`ControllerQuorumChannel.fork
        <broker.metadata.controller_channel.ControllerQuorumChannel.fork>`)."""
        self.core = core
        self.controller = controller
        self.metadata_conn = metadata_conn
        self.incarnation_id = uuid.uuid4().bytes
        self.broker_epoch = -1
        self.is_fenced = True
        self.want_shut_down = False
        self.should_shut_down = asyncio.Event()
        self.registered = asyncio.Event()
        # the image holds this broker's registration record and was acted on (docstring)
        self.caught_up = asyncio.Event()
        self._heartbeat_now = asyncio.Event()  # caught up: report it without waiting
        self.unreachable_log = RateLimitedLog(log, MonotonicClock(),
                                              UNREACHABLE_LOG_INTERVAL_MS)
        self.reader = MetadataLogReader(core.image)  # the log's rules (sans-IO)
        core.image = self.reader.image
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._heartbeat_loop()),
                       loop.create_task(self._fetch_loop())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []  # the channels are closed by who made them (the server)

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move leadership away; True once it agreed."""
        self.want_shut_down = True
        try:
            await asyncio.wait_for(self.should_shut_down.wait(), timeout_s)
            return True
        except TimeoutError:
            log.warning("controlled shutdown not confirmed within %.1f s", timeout_s)
            return False

    # -- registration and heartbeats -----------------------------------------------------

    async def _register(self) -> None:
        config = self.core.config
        host, port = config.advertised
        protocol = (("SASL_" if config.client_auth_required else "")
                    + ("SSL" if config.ssl_certfile else "PLAINTEXT"))
        listeners = [{"name": protocol, "host": host, "port": port,
                      "security_protocol": SECURITY_PROTOCOLS[protocol]}]
        internal = config.internal_advertised
        if internal is not None:  # Kafka's inter-broker listener, under its usual name
            internal_protocol = (("SASL_" if self.core.cluster_secret else "")
                                 + ("SSL" if config.ssl_certfile else "PLAINTEXT"))
            listeners.append({"name": INTERNAL_LISTENER, "host": internal[0],
                              "port": internal[1],
                              "security_protocol": SECURITY_PROTOCOLS[internal_protocol]})
        while True:
            try:
                body = await self.controller.request(ApiKey.BROKER_REGISTRATION, {
                    "broker_id": config.node_id, "cluster_id": config.cluster_id,
                    "incarnation_id": self.incarnation_id,
                    "listeners": listeners,
                    "features": [{"name": METADATA_VERSION_FEATURE,
                                  "min_supported_version": METADATA_VERSION,
                                  "max_supported_version": METADATA_VERSION}],
                    "rack": None,
                    "replica_logs": replica_log_reports(self.core.log_manager.all_logs(),
                                                        self.core.recovery.recovery_cuts)},
                    timeout_ms=5_000)
                if body["error_code"] == 0:
                    self.broker_epoch = body["broker_epoch"]
                    self.registered.set()
                    log.info("registered with the controller, broker epoch %d",
                             self.broker_epoch)
                    return
                log.warning("registration refused: %s",
                            error_for(body["error_code"], body["error_message"] or ""))
            except MiniKafkaError as exc:
                self.unreachable_log.info("register", "controller unreachable for "
                                          "registration: %s", exc)
            await asyncio.sleep(RETRY_BACKOFF_S * 5)

    async def _heartbeat_loop(self) -> None:
        config = self.core.config
        interval_s = config.broker_heartbeat_interval_ms / 1000
        await self._register()
        while True:
            try:
                body = await self.controller.request(ApiKey.BROKER_HEARTBEAT, {
                    "broker_id": config.node_id, "broker_epoch": self.broker_epoch,
                    "current_metadata_offset": self._applied_offset(),
                    "want_fence": False, "want_shut_down": self.want_shut_down},
                    timeout_ms=max(1000, config.broker_session_timeout_ms),
                    attempt_timeout_ms=heartbeat_attempt_timeout_ms(config))
                if body["error_code"] == 0:
                    self.is_fenced = body["is_fenced"]
                    if body["should_shut_down"]:
                        self.should_shut_down.set()
                    if body["report_replica_logs"]:
                        log.info("the controller asks for this broker's log ends (a "
                                 "partition waits for a safe leader): registering again")
                        await self._register()  # the same incarnation: a fresh report
                elif body["error_code"] in (ErrorCode.STALE_BROKER_EPOCH,
                                            ErrorCode.BROKER_NOT_AVAILABLE):
                    log.warning("heartbeat refused (%s): registering again",
                                ErrorCode(body["error_code"]).name)
                    self.incarnation_id = uuid.uuid4().bytes
                    await self._register()
                    continue
                else:
                    log.warning("heartbeat refused: %s",
                                error_for(body["error_code"], body["error_message"] or ""))
            except MiniKafkaError as exc:
                self.unreachable_log.info("heartbeat", "heartbeat failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), interval_s)
            self._heartbeat_now.clear()

    # -- metadata ------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        await self.registered.wait()
        while True:
            try:
                await self.fetch_step()
            except MiniKafkaError as exc:
                self.unreachable_log.info("fetch", "metadata fetch failed: %s", exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
            except Exception:
                log.exception("applying metadata failed")
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def fetch_step(self) -> None:
        """One metadata Fetch; reconcile when the image is complete and has changed
        (:class:`~broker.metadata.log_reader.MetadataLogReader`)."""
        reader = self.reader
        body = await self.metadata_conn.request(ApiKey.FETCH, {
            "replica_id": self.core.config.node_id, "max_wait_ms": METADATA_MAX_WAIT_MS,
            "min_bytes": 1, "max_bytes": 16 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{
                "name": METADATA_TOPIC, "partitions": [{
                    "partition": METADATA_PARTITION,
                    "fetch_offset": reader.fetch_offset,
                    "partition_max_bytes": 16 << 20}]}]},
            timeout_ms=METADATA_MAX_WAIT_MS + 10_000)
        if body["error_code"]:
            raise error_for(body["error_code"], "metadata fetch refused")
        part = body["responses"][0]["partitions"][0]
        if part["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE:
            log.warning("metadata log does not have offset %d any more: rebuilding the image",
                        reader.fetch_offset)
            reader.on_out_of_range()
            self.core.image = reader.image
            return
        if part["error_code"]:
            raise error_for(part["error_code"],
                            f"metadata fetch of {METADATA_TOPIC}-{METADATA_PARTITION}")
        reconcile = reader.on_answer(part["records"], part["high_watermark"])
        if reconcile:
            await self.core.prepare_logs()  # new logs first, a loop turn every few
            self.core.reconcile()
        if (not self.caught_up.is_set() and reader.at_high_watermark
                and 0 <= self.broker_epoch <= self._applied_offset()):
            self.caught_up.set()
            self._heartbeat_now.set()  # the controller unfences on this offset: say it now
            log.info("metadata caught up: applied to offset %d (registered at %d)",
                     self._applied_offset(), self.broker_epoch)

    def catch_up_status(self) -> str:
        """Why :attr:`caught_up` is not set yet (for the server's log)."""
        where = self.controller.address
        if not self.registered.is_set():
            return f"not registered with the controller at {where} yet"
        return (f"metadata image at offset {self._applied_offset()}, registered at offset "
                f"{self.broker_epoch} (controller {where})")

    def _applied_offset(self) -> int:
        return self.reader.image.last_applied_offset

    def alter_partition_body(self, proposals: list[Any]) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for p in proposals:
            topics.setdefault(p.topic, []).append({
                "partition_index": p.partition, "leader_epoch": p.leader_epoch,
                "new_isr": list(p.new_isr), "partition_epoch": p.partition_epoch})
        return {"broker_id": self.core.config.node_id, "broker_epoch": self.broker_epoch,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
