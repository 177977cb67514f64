"""The broker's main process: the composition root, an asyncio loop around :class:`BrokerCore`.

This is the thin adapter of docs/broker.md and the one place that builds the broker
(the wiring: only this module imports :mod:`broker.core`): it creates the core (with its
controller-mode collaborators: :class:`ControllerLink`), the shared-memory BufferPool
and the network processes (:class:`NetworkProcessSupervisor`), turns each REQUEST
descriptor into a zero-copy view of the pool buffer, decodes it, runs the handler (with
a :class:`~broker.handlers.common.RequestContext`: the request's API version, whose
shape the answer must have, and its client id) and hands the answer to its
:class:`~broker.requests.responses.ResponseSender` (encoded at that version into a new
pool buffer; for Fetch: the prefix plus the list of file regions the network process
will ``sendfile``).  It also schedules the background work (retention, flush policy,
checkpoints, network-process supervision, ISR checks) on the same loop, starts and
stops the controller link (the metadata follower's registration and heartbeats,
AlterPartition requests, the replica fetchers) and shuts everything down in order.

Start-up order (Kafka's BrokerServer.startup): the core opens its logs, the network
processes start with both listeners bound but not listening (the ports are known, so
the broker can register them), the controller link registers and follows the metadata
log, and only once the image holds this broker's registration and was acted on
(:attr:`~broker.metadata.follower.MetadataFollower.caught_up`) do both listeners listen
(``NetworkProcessSupervisor.start_listening``), the "listening on" line is logged and
``on_ready`` runs.  Until then a connect is refused (clients try their other bootstrap
brokers); a controller that stays away keeps the broker waiting, never serving stale
state.  A standalone broker listens at once.  docs/broker.md says why the internal
listener waits too.

Malformed requests: a frame whose header cannot be decoded, an unknown API key, an
unsupported version or a body that violates the API's schema closes the connection
(Kafka does the same), after logging the precise reason; ApiVersions at an unsupported
version is answered with UNSUPPORTED_VERSION at v0 so clients can negotiate.

Request times: each answer carries the request's metric slots and three instants of
this process (taken off the channel, the handler returned, answered) to the network
process, which records every phase (:mod:`broker.metrics.request_times`).

Logins come first (:class:`~broker.requests.logins.ConnectionLogins`: sessions, peer
addresses, the internal listener's login deadlines, failed logins answered late and
then closed).  Then per-request bounds (``max_metadata_topics``,
``max_fetch_partitions``, ``max_produce_partitions``) are checked on the frame before
the body is decoded (:mod:`broker.network.request_bounds`), so an oversized request
costs O(bound), and answered by :mod:`broker.handlers.bounds` (a Produce over its
bound: the connection is closed).

A Produce whose record check is too large for the loop finishes on the record-check
thread (:mod:`broker.handlers.record_checks`, started and stopped here, before the pool
goes): the handler keeps the request's frame (``RequestContext.keep_frame``) and frees it
once answered; every other request's frame is freed when its handler returns.

Error answers never close a healthy connection: a handler that raises, or whose answer
cannot be encoded (a bug), gets UNKNOWN_SERVER_ERROR in the API's request-level
``error_code`` (Kafka's answer, :meth:`~broker.requests.responses.ResponseSender.
send_error`); only an API version without such a field is closed.

Not thread-safe: everything runs on the loop's thread (but the record-check thread's
pure checks of kept frames).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.registry import CollectorRegistry

from broker.auth import broker_login, read_cluster_secret, scram_decoy_key
from broker.config import BrokerConfig
from broker.core import BrokerCore, ControllerLink
from broker.handlers.bounds import answer_over_bound
from broker.handlers.common import RequestContext
from broker.handlers.dispatch import HANDLERS, unsupported_api_versions_answer
from broker.handlers.fetch import replica_id_of
from broker.handlers.record_checks import RecordCheckThread
from broker.metadata.alter_partition import AlterPartitionManager
from broker.metadata.controller_channel import ControllerQuorumChannel
from broker.metadata.controller_finder import ActiveControllerFinder
from broker.metadata.follower import MetadataFollower
from broker.metadata.quorum_voters import parse_quorum_voters
from broker.metrics.broker_collector import BrokerCollector
from broker.metrics.endpoint import MetricsEndpoint
from broker.metrics.request_metrics import RequestTimesCollector
from broker.metrics.request_times import FETCH_FOLLOWER, fetch_slot, pack_slots
from broker.metrics.scrape_login import scrape_login
from broker.network.channel.codec import (
    CLOSED,
    MAX_PIPELINED_REQUESTS,
    PEER,
    REQUEST,
    is_internal_connection,
)
from broker.network.channel.main_side import MainChannelEndpoint
from broker.network.request_bounds import check_request_bounds
from broker.network.supervisor import NetworkProcessSupervisor
from broker.producer_ids import ControllerProducerIdAllocator, controller_block_source
from broker.replica_fetcher import ReplicaFetcherManager
from broker.requests.logins import ConnectionLogins
from broker.requests.pipeline import RequestLanes
from broker.requests.responses import ResponseSender, close_connection
from clients.memory.buffer_pool import BufferPool
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request_body, decode_request_header
from clients.protocol.errors import MiniKafkaError
from clients.protocol.topics import TopicPartition
from replication.isr import AlterPartitionProposal
from timer.clock import Clock, MonotonicClock
from timer.drivers import AsyncioTimerDriver
from timer.system_timer import SystemTimer

log = logging.getLogger(__name__)

SUPERVISE_INTERVAL_S = 0.2
CONTROLLED_SHUTDOWN_S = 5.0
CATCH_UP_QUIET_S = 1.0  # still catching up after this long: said at INFO
CATCH_UP_LOG_INTERVAL_S = 30.0  # and again this often while it lasts


class BrokerServer:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or MonotonicClock()
        self.pool: BufferPool | None = None
        self.supervisor: NetworkProcessSupervisor | None = None
        self.core: BrokerCore | None = None
        self._stop = asyncio.Event()
        self._timers: list[asyncio.TimerHandle] = []
        self.logins: ConnectionLogins | None = None  # with the core (its secret, users)
        self.responses: ResponseSender | None = None  # with the pool
        self.follower: MetadataFollower | None = None
        # controller mode: built before the core (_controller_link)
        self.fetchers: ReplicaFetcherManager | None = None
        self.controller: ControllerQuorumChannel | None = None
        self.metadata_channel: ControllerQuorumChannel | None = None  # the long poll's
        self.alter_partitions: AlterPartitionManager | None = None  # with the follower
        # finishes the record checks of Produce requests too large for the loop
        self.record_checks = RecordCheckThread(config.record_check_inline_bytes)
        # which pipelined requests of a connection start now (Produce after Produce)
        self.lanes: RequestLanes | None = None  # with the pool
        self.metrics: MetricsEndpoint | None = None

    @property
    def port(self) -> int:
        return self.supervisor.port if self.supervisor else self.config.port

    # -- lifecycle -------------------------------------------------------------------

    async def serve(self, on_ready: Callable[[BrokerServer], None] | None = None) -> None:
        loop = asyncio.get_running_loop()
        driver = AsyncioTimerDriver(SystemTimer(self.clock), loop)
        link = self._controller_link() if self.config.controller_address else None
        self.core = BrokerCore(self.config, self.clock, driver,  # type: ignore[arg-type]
                               link)
        self.core.startup()
        self.logins = ConnectionLogins(
            self.config, self.clock, cluster_secret=self.core.cluster_secret,
            users=self.core.users,
            decoy_key=scram_decoy_key(self.core.cluster_secret, self.core.data_dir))
        self.pool = BufferPool.create(self.config.buffer_pool_bytes,
                                      self.config.buffer_poolable_bytes)
        self.responses = ResponseSender(self.pool)
        self.lanes = RequestLanes(self.pool, self._dispatch)
        self.record_checks.start(loop)
        try:
            self.supervisor = NetworkProcessSupervisor(  # answers kept in order: lanes
                self.config, self.pool, max_pipelined_requests=MAX_PIPELINED_REQUESTS)
            # with a controller: bound, not listening, until the image caught up
            self.supervisor.start(listening=not self.config.controller_address)
            if (self.config.port, self.config.internal_port) != (
                    self.supervisor.port, self.supervisor.internal_port):  # 0: kernel's choice
                self.config = dataclasses.replace(self.config, port=self.supervisor.port,
                                                  internal_port=self.supervisor.internal_port)
                self.core.config = self.config
            for endpoint in self.supervisor.endpoints:
                self._attach(loop, endpoint)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
            if self.config.controller_address:
                self._start_controller_link()
            self._schedule(loop)
            if self.config.metrics_port >= 0:
                await self._start_metrics()
            if await self._caught_up():
                self.supervisor.start_listening()
                log.info("broker %d listening on %s:%d%s", self.config.node_id,
                         self.config.host, self.port, "" if self.config.internal_port < 0 else
                         f", internal listener on "
                         f"{self.config.internal_host or self.config.host}"
                         f":{self.config.internal_port}")
                if on_ready is not None:
                    on_ready(self)
                await self._stop.wait()
            await self._stop_controller_link()
        finally:
            if self.metrics is not None:
                await self.metrics.stop()
            for handle in self._timers:
                handle.cancel()
            self.logins.close()
            self.responses.close()
            if self.supervisor is not None:
                self.supervisor.stop()
            self.record_checks.stop()  # before the pool goes: it reads requests' frames
            driver.shutdown()
            self.core.shutdown()
            self.pool.close()
            log.info("broker %d stopped", self.config.node_id)

    def stop(self) -> None:
        self._stop.set()

    async def _caught_up(self) -> bool:
        """Kafka's start-up order (BrokerServer.startup): a broker with a controller
        serves once its metadata image holds its own registration and was acted on
        (:attr:`MetadataFollower.caught_up`); until then its listeners are bound and
        not listening, so clients go to other bootstrap brokers instead of being
        answered from an empty or stale image.  Waits as long as it takes (a controller
        that is down: a line at INFO after ``CATCH_UP_QUIET_S``, then every
        ``CATCH_UP_LOG_INTERVAL_S``); False when the broker is stopped first.
        A standalone broker has nothing to catch up with."""
        follower = self.follower
        if follower is None:
            return not self._stop.is_set()
        caught_up = asyncio.ensure_future(follower.caught_up.wait())
        stopped = asyncio.ensure_future(self._stop.wait())
        started = time.monotonic()
        timeout_s = CATCH_UP_QUIET_S
        try:
            while True:
                await asyncio.wait({caught_up, stopped}, timeout=timeout_s,
                                   return_when=asyncio.FIRST_COMPLETED)
                if stopped.done():
                    return False
                if caught_up.done():
                    if time.monotonic() - started >= CATCH_UP_QUIET_S:
                        log.info("broker %d: metadata caught up after %.1f s; serving",
                                 self.config.node_id, time.monotonic() - started)
                    return True
                log.info("broker %d: not serving clients yet (ports bound, not listening) "
                         "until its metadata catches up: %s", self.config.node_id,
                         follower.catch_up_status())
                timeout_s = CATCH_UP_LOG_INTERVAL_S
        finally:
            caught_up.cancel()
            stopped.cancel()

    async def _start_metrics(self) -> None:
        """The metrics port (broker.metrics.endpoint says why it lives here)."""
        core, pool, logins, config = self.core, self.pool, self.logins, self.config
        assert core is not None and pool is not None and logins is not None
        registry = CollectorRegistry(auto_describe=False)
        assert self.supervisor is not None
        requests = RequestTimesCollector(self.supervisor.request_times)
        registry.register(BrokerCollector(core, requests, pool, logins.failures,
                                          self.fetchers))
        self.metrics = MetricsEndpoint(
            registry, config.metrics_host, config.metrics_port, config.metrics_max_connections,
            config.request_read_timeout_ms / 1000,
            scrape_login(core.users, core.authorizer) if config.client_auth_required else None)
        await self.metrics.start()
        log.info("broker %d: metrics on http://%s:%d/metrics", config.node_id,
                 config.metrics_host, self.metrics.port)

    # -- controller mode -------------------------------------------------------------

    def _controller_link(self) -> ControllerLink:
        """The core's controller-mode collaborators, built before it: they reach the core
        only through this server (``self.core``, ``self.follower``,
        ``self.alter_partitions``) once those exist."""
        secret = read_cluster_secret(self.config.cluster_secret_file)

        def on_repaired(key: TopicPartition, segment_base_offset: int) -> None:
            if self.core is not None:
                self.core.repair.on_segment_repaired(key, segment_base_offset)

        fetchers = ReplicaFetcherManager(self.config, secret, self.clock, on_repaired)
        self.fetchers = fetchers
        # a TLS cluster's controller speaks TLS too (the launcher gives it the same files)
        # one or more voters: requests go to the active one (broker.metadata.controller_channel)
        # (real time, as the connections' deadlines: a test's manual broker clock
        # does not hold up a backoff)
        finder = ActiveControllerFinder(parse_quorum_voters(self.config.controller_address),
                                        MonotonicClock())
        controller = ControllerQuorumChannel(finder,
                                             client_id=f"broker-{self.config.node_id}",
                                             login=broker_login(secret, self.config.node_id),
                                             ssl_context=fetchers.tls)
        self.controller = controller
        producer_ids = ControllerProducerIdAllocator(controller_block_source(
            controller, self.config.node_id,
            lambda: self.follower.broker_epoch if self.follower is not None else -1))
        return ControllerLink(
            controller=controller, fetchers=fetchers, producer_ids=producer_ids,
            send_alter_partition=self._send_alter_partition)

    def _start_controller_link(self) -> None:
        core, controller = self.core, self.controller
        assert core is not None and controller is not None
        if self.fetchers is not None:  # the throttle follows the dynamic rate, from now on
            throttle, dynamic = self.fetchers.throttle, core.dynamic_configs
            throttle.set_rate(dynamic.follower_replication_throttled_rate)
            dynamic.listen(lambda: throttle.set_rate(dynamic.follower_replication_throttled_rate))
        self.metadata_channel = controller.fork(controller.client_id + "-metadata")
        self.follower = MetadataFollower(core, controller, self.metadata_channel)
        self.alter_partitions = AlterPartitionManager(controller, self.follower, core.isr)
        self.follower.start()

    def _send_alter_partition(self, proposal: AlterPartitionProposal) -> None:
        assert self.core is not None
        if self.alter_partitions is None:  # not linked yet: proposed again later
            self.core.isr.on_unanswered(proposal)
            return
        self.alter_partitions.send(proposal)

    async def _stop_controller_link(self) -> None:
        follower, fetchers, controller = self.follower, self.fetchers, self.controller
        if follower is None or fetchers is None or controller is None:
            return
        if follower.registered.is_set():  # else the controller has nothing to move
            await follower.controlled_shutdown(CONTROLLED_SHUTDOWN_S)
        await fetchers.stop()
        await follower.stop()
        if self.alter_partitions is not None:
            self.alter_partitions.stop()
        await controller.aclose()
        if self.metadata_channel is not None:
            await self.metadata_channel.aclose()

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        core = self.core
        assert core is not None
        jobs: list[tuple[float, Callable[[], Any]]] = [
            (SUPERVISE_INTERVAL_S, self._supervise),
            (self.config.retention_check_interval_ms / 1000, core.run_retention),
            (self.config.flush_scheduler_interval_ms / 1000, core.flush_dirty_logs),
            (self.config.checkpoint_interval_ms / 1000, core.write_checkpoints),
            (self.config.log_cleaner_interval_ms / 1000, core.run_log_cleaner),
            (self.config.log_scrub_interval_ms / 1000, core.repair.run_scrubber),
        ]
        if self.config.controller_address:
            jobs.append((max(0.05, self.config.replica_lag_time_max_ms / 4000),
                         core.isr.check_isr))
        for interval, job in jobs:
            self._every(loop, interval, job)

    def _every(self, loop: asyncio.AbstractEventLoop, interval_s: float,
               job: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                job()
            except Exception:
                log.exception("scheduled job %s failed", getattr(job, "__name__", job))
            self._timers.append(loop.call_later(interval_s, run))
            if len(self._timers) > 64:
                self._timers = [t for t in self._timers if not t.cancelled()][-16:]

        self._timers.append(loop.call_later(interval_s, run))

    def _attach(self, loop: asyncio.AbstractEventLoop, endpoint: MainChannelEndpoint) -> None:
        lanes = self.lanes
        assert lanes is not None
        endpoint.on_answered = lambda conn_id: lanes.answered(endpoint, conn_id)
        endpoint.attach_loop(loop, lambda msgs: self._on_messages(endpoint, msgs),
                             self._supervise)

    def _supervise(self) -> None:
        if self.supervisor is None or self.logins is None:
            return
        loop = asyncio.get_running_loop()
        for restart in self.supervisor.poll():
            log.warning("network process %d (pid %d) died with %d; restarted as pid %d, "
                        "%d connections lost", restart.index, restart.old_pid,
                        restart.returncode, restart.new_pid, len(restart.lost_conn_ids))
            self._attach(loop, self.supervisor.endpoint(restart.index))
            if self.lanes is not None:
                self.lanes.endpoint_gone(restart.index)
            for conn_id in restart.lost_conn_ids:
                self.logins.forget((restart.index, conn_id))
        self._close_late_logins()

    def _close_late_logins(self) -> None:
        """Close internal-listener connections that did not log in in time."""
        assert self.supervisor is not None and self.logins is not None
        for key in self.logins.late_logins():
            log.warning("closing connection %d.%d: no broker login on the internal "
                        "listener within request_read_timeout_ms", *key)
            self.supervisor.endpoint(key[0]).send_close(key[1])

    # -- requests --------------------------------------------------------------------

    def _on_messages(self, endpoint: MainChannelEndpoint, messages: list[Any]) -> None:
        logins, lanes = self.logins, self.lanes
        assert logins is not None and lanes is not None
        for message in messages:
            if message[0] == REQUEST:
                lanes.admit(endpoint, message[1], message[2], message[3])
            elif message[0] == PEER:
                logins.on_peer((endpoint.index, message[1]), message[2])
            elif message[0] == CLOSED:  # (a late response is freed by the network side)
                logins.forget((endpoint.index, message[1]))
                lanes.closed(endpoint.index, message[1])

    def _dispatch(self, endpoint: MainChannelEndpoint, conn_id: int, frame: memoryview,
                  keep_frame: Callable[[], Callable[[], None]] | None = None,
                  ticket: int | None = None) -> None:
        core, logins, responses = self.core, self.logins, self.responses
        assert core is not None and logins is not None and responses is not None
        started = time.monotonic()  # the request times (broker.metrics.request_times)
        try:
            header = decode_request_header(frame)
        except MiniKafkaError as exc:
            close_connection(endpoint, conn_id, exc)
            return
        if header.body_offset < 0 and header.api_key == ApiKey.API_VERSIONS:
            # Kafka's fallback: a v0 answer any client can read, naming our versions
            now = time.monotonic()
            responses.send(endpoint, conn_id, ApiKey.API_VERSIONS, 0, header.correlation_id,
                           unsupported_api_versions_answer(),
                           timing=(ApiKey.API_VERSIONS, started, now, now), ticket=ticket)
            return
        api_key, version, correlation_id = header.api_key, header.api_version, \
            header.correlation_id
        responded = False
        fetch_from = -1  # a Fetch: counted again as FetchConsumer or FetchFollower
        local_at = 0.0  # the handler returned without answering: the rest is remote time

        def timing() -> tuple[int, float, float, float]:
            now = time.monotonic()
            return pack_slots(api_key, fetch_from), started, local_at or now, now

        def respond(body: dict[str, Any] | None) -> None:
            nonlocal responded
            responded = True
            if fetch_from >= 0 and body is not None:  # bytes out (broker.metrics)
                core.topic_metrics.on_fetch_response(body, fetch_from == FETCH_FOLLOWER)
            if body is None:
                endpoint.send_no_response(conn_id, timing(), ticket=ticket)
            else:
                responses.send(endpoint, conn_id, api_key, version, correlation_id, body,
                               timing=timing(), ticket=ticket)

        # the login comes first: before it, no request is answered, over a bound or not
        if not logins.login_first(endpoint, conn_id, api_key):
            return
        over = check_request_bounds(header, max_metadata_topics=self.config.max_metadata_topics,
                                    max_fetch_partitions=self.config.max_fetch_partitions,
                                    max_produce_partitions=self.config.max_produce_partitions)
        if over is not None:
            if answer_over_bound(core, api_key, version, respond):
                log.warning("connection %d.%d: %s; answered without reading it",
                            endpoint.index, conn_id, over)
            else:  # no answer says it (Produce has no request-level error): closed
                close_connection(endpoint, conn_id, over)
            return
        try:
            request = decode_request_body(header)
        except MiniKafkaError as exc:
            close_connection(endpoint, conn_id, exc)
            return
        if request.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            logins.authenticate(endpoint, conn_id, request, version, respond)
            if not responded:  # a failed login is answered late
                local_at = time.monotonic()
            return
        if api_key == ApiKey.FETCH:
            fetch_from = fetch_slot(replica_id_of(request.body, version))
        handler = HANDLERS.get(request.api_key)
        if handler is None:
            log.warning("closing connection %d.%d: API %s is not served by a broker",
                        endpoint.index, conn_id, ApiKey(request.api_key).name)
            endpoint.send_close(conn_id)
            return
        session = logins.session((endpoint.index, conn_id))
        try:
            handler(core, request.body, respond, RequestContext(
                version, request.client_id or "",
                None if session is None else session.principal,
                bool(core.cluster_secret),
                core.authorizer if core.authorizer.enabled else None,
                replication_allowed=(is_internal_connection(conn_id)
                                     or self.config.internal_port < 0),
                record_checks=self.record_checks, keep_frame=keep_frame))
        except Exception:
            log.exception("handler for %s failed", ApiKey(api_key).name)
            if not responded:
                responses.send_error(endpoint, conn_id, api_key, version, correlation_id,
                                     timing=timing(), ticket=ticket)
            return
        if not responded:  # answered later: from a purgatory or the record-check thread
            local_at = time.monotonic()


def run_broker(config: BrokerConfig, on_ready: Callable[[BrokerServer], None] | None = None) -> int:
    """Serve until stopped, on uvloop's event loop when it is installed (issue 36: each
    turn of the loop is on the acks=all path several times per produce; libuv's loop
    takes less of it than asyncio's selector loop), else on asyncio's."""
    server = BrokerServer(config)
    try:
        import uvloop
    except ImportError:
        asyncio.run(server.serve(on_ready))
    else:
        uvloop.run(server.serve(on_ready))
    return 0
