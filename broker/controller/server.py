"""The controller process: ``python -m broker.controller --port P --data-dir D``.

One asyncio process around :class:`~broker.controller.state.ControllerState` (the pure
core) and :class:`~broker.controller.log.ControllerLog` (the fsync'd metadata log and
snapshots).  Prints ``controller listening on HOST:PORT`` once it serves; SIGTERM/SIGINT
close the listener and the log and exit 0.

Wire: Kafka's protocol (:mod:`clients.protocol`), each request answered in the shape of
its version (our brokers send every request at our highest version).

Who is served: with a cluster secret (``cluster_secret_file``, every ``cluster start``
cluster) the cluster's brokers only.  Before a broker login a connection gets
ApiVersions and the SASL exchange (SaslHandshake v1, SaslAuthenticate; SCRAM-SHA-256 with
the brokers' credentials, :class:`~broker.auth.SaslSession`) and nothing else: any other
request closes it, checked before anything else about the frame (its bounds, its body);
one not logged in within ``request_read_timeout_ms`` of opening is closed too.  A failed
login is answered ``connection_failed_authentication_delay_ms`` later (the connection's
task sleeps; at most ``max_delayed_authentication_failures`` at once, beyond which the
answer goes at once) and the connection closed; failures count per name and address
(:mod:`broker.login_failures`; brokers' names are never counted or locked out).  After
the login the broker-id APIs must name the logged-in broker
(:func:`~broker.auth.broker_request_refusal`: CLUSTER_AUTHORIZATION_FAILED).  Clients'
admin requests reach the controller as brokers forward them, after the broker checked
the client's login and ACLs.  Without a secret (a node started by hand on loopback)
anyone is served every API.  Served APIs, at the versions of
:data:`clients.protocol.registry.APIS`:

- ApiVersions (also Kafka's v0 fallback answer to a version it does not know).
- BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds (v0, with our
  tagged ``error_message``).  A registration needs a listener (the first one is the
  broker's address; its name and security protocol are not checked) and must declare
  the feature :data:`~broker.metadata.records.METADATA_VERSION_FEATURE` with a range that
  holds :data:`~broker.metadata.records.METADATA_VERSION` (else UNSUPPORTED_VERSION, as
  Kafka refuses a broker that cannot read its ``metadata.version``); other features are
  ignored.  ``incarnation_id`` (a UUID) is kept as 32 hex digits.
- CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
  ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments, forwarded by
  brokers as their clients sent them (rules in
  :mod:`broker.controller.topics` and :mod:`broker.controller.state`).  CreateTopics
  answers ``configs`` null (Kafka's "not returned"): the forwarding broker fills them in
  from its catalog of defaults.
- Metadata: every registered broker with its ``fenced`` flag, partitions with
  ``unclean_elected``, topics with their ``configs`` (our tagged extras: flexible
  versions only, v9+); ``controller_id`` -1; topics asked by id only (v12) get
  UNKNOWN_TOPIC_ID; v0's empty list means every topic.
- DescribeQuorum (v0-1): the single controller as a quorum of one voter (``node_id``),
  leader at epoch 0, high watermark = log end; a voter of a quorum (several
  ``controller_quorum_voters``) answers its view (:mod:`broker.controller.quorum.driver`).
- A quorum's voter serves the others Vote, BeginQuorumEpoch, EndQuorumEpoch,
  FetchSnapshot (v0) and a Fetch with a voter's ``replica_id``
  (:meth:`QuorumDriver.handle_request`; with a secret, as the voter logged in as
  ``controller-<id>``, :func:`~broker.auth.controller_login`); the rest is as
  :mod:`broker.controller.apis` says (NOT_CONTROLLER off the active controller).
- Fetch of ``__cluster_metadata`` partition 0 (record batches whose record values are
  metadata records; the high watermark and last stable offset are the log end, since
  everything is fsync'd before it is readable; log start 0).  Other partitions get
  UNKNOWN_TOPIC_OR_PARTITION, an offset outside ``[0, log end]`` OFFSET_OUT_OF_RANGE
  (both with Kafka's -1 offsets), an incremental fetch session FETCH_SESSION_ID_NOT_FOUND
  (no sessions: ``session_id`` 0).  A Fetch at the log end waits up to
  ``min(max_wait_ms, max_fetch_wait_ms)`` and is answered as soon as a record is
  appended.

Requests of one connection are handled one at a time and answered in order (Kafka's
rule), so a long-poll Fetch delays whatever is pipelined behind it on the same
connection: brokers should fetch metadata on a connection of its own.  A frame longer
than ``max_request_bytes``, one that cannot be decoded or an API the controller does not
serve closes the connection (after logging why); ApiVersions at an unknown version is
answered with UNSUPPORTED_VERSION; a handler that fails (a bug) or an answer that
cannot be encoded gets UNKNOWN_SERVER_ERROR where the API has a request-level error
code (:mod:`broker.network.error_answer`), the connection stays open.

Connection limits (``_serve_connection``/``_serve_one``): at most ``max_connections``
client connections, ``max_connections_per_ip`` from one address; beyond those, up to
``reserved_broker_connections`` more are taken **on probation** - their first request
other than ApiVersions must be a broker's (BrokerRegistration, BrokerHeartbeat,
AlterPartition, AllocateProducerIds, or a Fetch with ``replica_id >= 0``), anything else
closes them - so idle or busy clients cannot keep a (re)starting broker from
registering; reserved connections without a request for ``broker_session_timeout_ms``
are closed (a broker heartbeats well within that).  Without a secret a client that
speaks a broker API can take a reserved place too (the reserve protects against
exhaustion, not against impersonation); with one, only a broker login keeps any place
beyond ``request_read_timeout_ms``.  Client connections without a request for
``connections_max_idle_ms`` are closed, as are connections that do not read an answer
within it; a frame must arrive within
``request_read_timeout_ms`` of its first byte (the frame's memory grows as its bytes
arrive: ``StreamReader``); Metadata naming more than ``max_metadata_topics`` topics or
a Fetch naming more than ``max_fetch_partitions`` partitions is answered (no topic /
INVALID_REQUEST) before its body is decoded (:mod:`broker.network.request_bounds`) -
after the login check, so only to a logged-in broker when there is a secret.

The handlers live in :class:`~broker.controller.apis.ControllerApis`; this module is the
connection side (places, logins, bounds, framing).  Every mutation follows one path with
no ``await`` before the records are written: core method -> records ->
``ControllerLog.append`` (fsync) -> wake waiting fetches -> answer; in a quorum: core
method -> records -> proposed to the replica -> (await) committed by a majority ->
answer.  If the append fails the image is ahead of the disk, so the process logs the
error and exits 1.

Not thread-safe: one event loop owns everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client.registry import CollectorRegistry

from broker.auth import (
    SaslSession,
    broker_request_refusal,
    is_internal,
    needs_login,
    read_cluster_secret,
    scram_decoy_key,
)
from broker.config import parse_ip_overrides, parse_overrides
from broker.controller.apis import ControllerApis, FatalControllerError
from broker.controller.config import ControllerConfig
from broker.controller.log import ControllerLog
from broker.controller.quorum.metadata_quorum import NotCommittedError, controller_quorum
from broker.controller.state import ControllerState
from broker.login_failures import LoginFailureLimits, LoginFailures
from broker.metadata.image import MetadataImage
from broker.metrics.controller_collector import ControllerCollector
from broker.metrics.endpoint import MetricsEndpoint
from broker.metrics.request_metrics import RequestMetrics
from broker.network.error_answer import error_answer
from broker.network.request_bounds import check_request_bounds
from clients.protocol.api_keys import ApiKey, api_name
from clients.protocol.codec import decode_request_body, decode_request_header, encode_response
from clients.protocol.errors import (
    ErrorCode,
    MiniKafkaError,
    ProtocolError,
)
from clients.protocol.framing import frame_length_of
from clients.protocol.registry import APIS
from clients.protocol.scram import controller_id_of
from storage.meta_properties import check_data_dir_identity
from timer.clock import Clock, MonotonicClock

log = logging.getLogger(__name__)

BROKER_APIS = frozenset({ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT,
                         ApiKey.ALTER_PARTITION, ApiKey.ALLOCATE_PRODUCER_IDS})


def _refusal_answer(api_key: int, version: int, reason: str) -> dict[str, Any]:
    """CLUSTER_AUTHORIZATION_FAILED in the API's shape (the reason names no epoch)."""
    if api_key == ApiKey.FETCH:
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                "responses": []}
    answer = error_answer(api_key, version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED) or {}
    if any(f.name == "error_message" for f in APIS[api_key].response.fields_at(version)):
        answer["error_message"] = reason
    return answer


QUORUM_APIS = frozenset({ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
                         ApiKey.FETCH_SNAPSHOT})


def _is_quorum_request(api_key: int, body: dict[str, Any], voters: Sequence[int]) -> bool:
    """A request of another voter: Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot,
    or a Fetch whose ``replica_id`` is a voter's (brokers' ids never are one)."""
    return api_key in QUORUM_APIS or (api_key == ApiKey.FETCH and body["replica_id"] in voters)


def _is_broker_request(api_key: int, body: dict[str, Any]) -> bool:
    """A request only a broker sends: the broker APIs, or a Fetch as replica (a broker's
    metadata log fetch carries its node id)."""
    return api_key in BROKER_APIS or (api_key == ApiKey.FETCH and body["replica_id"] >= 0)


class _Peer:
    """One connection's place: client or reserved for a broker (``probation`` until its
    first request other than ApiVersions proved it a broker's), whether a frame is
    being read (for the log), and (with a cluster secret) the loop time by which it must
    have logged in as a broker."""

    __slots__ = ("ip", "login_by", "probation", "reading", "reserved", "session")

    def __init__(self, ip: str, *, reserved: bool) -> None:
        self.ip = ip
        self.reserved = reserved
        self.probation = reserved
        self.reading = False
        self.session: SaslSession | None = None  # SASL state; a principal once logged in
        self.login_by: float | None = None  # None: no login required, or logged in

    @property
    def principal(self) -> str | None:
        return None if self.session is None else self.session.principal


class ControllerServer:
    def __init__(self, config: ControllerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.cluster_secret = read_cluster_secret(config.cluster_secret_file)
        self.clock = clock or MonotonicClock()
        # only brokers log in here, and only with a secret: no key to keep without one
        self._decoy_key = scram_decoy_key(self.cluster_secret, None)
        self.login_failures = LoginFailures(LoginFailureLimits.of(config), self.clock)
        self._delaying = 0  # connections waiting to be told their login failed
        check_data_dir_identity(config.data_dir, config.cluster_id)
        # one voter (or none named): the single controller and its fsync'd log, as before
        self.store: ControllerLog | None = None
        self.quorum = controller_quorum(config, self.clock, self.cluster_secret,
                                        self._on_quorum_image, self._on_quorum_commit,
                                        self._fail)
        if self.quorum is None:
            self.store = ControllerLog(
                config.data_dir,
                snapshot_interval_records=config.metadata_snapshot_interval_records,
                max_batch_records=config.metadata_max_batch_records)
        self.apis: ControllerApis | None = None  # once the metadata log is open
        self.port = config.port
        self._stop = asyncio.Event()
        self._fatal: BaseException | None = None
        self._connections: set[asyncio.Task[None]] = set()  # every connection's task
        self._clients = 0  # connections in client places
        self._reserved = 0  # connections in places reserved for brokers
        self._per_ip: dict[str, int] = {}  # client places by peer address
        self._per_ip_overrides = parse_ip_overrides(config.max_connections_per_ip_overrides)
        self.request_metrics = RequestMetrics()  # scraped on metrics_port (broker.metrics)
        self.metrics: MetricsEndpoint | None = None

    def _fail(self, error: BaseException) -> None:
        self._fatal = error
        self._stop.set()

    # -- lifecycle ----------------------------------------------------------------------

    def _on_quorum_image(self, image: MetadataImage, active: bool) -> None:
        """The quorum became active (``image``: the committed one) or stopped being so
        (``image``: rebuilt from the committed log): a fresh state over it, as a
        controller that just started (broker sessions start anew)."""
        if self.apis is not None:
            self.apis.state = ControllerState(self.config, self.clock, image)
            self.apis.wake_fetches()  # fetches waiting on a former leader: answered now

    def _on_quorum_commit(self) -> None:
        if self.apis is not None:
            self.apis.wake_fetches()

    async def serve(self, on_ready: Callable[[ControllerServer], None] | None = None) -> int:
        if self.quorum is not None:
            self.quorum.open()
            image = self.quorum.image  # empty: committed entries are applied as learned
        else:
            assert self.store is not None
            image = self.store.open()
            log.info("metadata log open: %d records, snapshot %s",
                     image.last_applied_offset + 1, self.store.snapshot_loaded)
        apis = self.apis = ControllerApis(
            self.config, ControllerState(self.config, self.clock, image), self.store,
            self._fail, self.quorum)
        loop = asyncio.get_running_loop()
        tls = self.config.tls_context()
        server = await asyncio.start_server(
            self._serve_connection, self.config.host, self.config.port, reuse_address=True,
            ssl=tls, ssl_handshake_timeout=(self.config.request_read_timeout_ms / 1000
                                            if tls is not None else None))
        try:
            self.port = server.sockets[0].getsockname()[1]
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
            ticker = asyncio.create_task(self._tick_loop(apis))
            if self.quorum is not None:
                self.quorum.start()
            if self.config.metrics_port >= 0:
                await self._start_metrics()
            if on_ready is not None:
                on_ready(self)
            await self._stop.wait()
            ticker.cancel()
        finally:
            if self.quorum is not None:
                await self.quorum.stop()  # an active leader hands over (EndQuorumEpoch)
            if self.metrics is not None:
                await self.metrics.stop()
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            with contextlib.suppress(Exception):
                await server.wait_closed()
            if self.quorum is not None:
                self.quorum.close()
            if self.store is not None:
                self.store.close()
        if self._fatal is not None:
            log.critical("controller stopped: %s", self._fatal)
            return 1
        return 0

    def stop(self) -> None:
        self._stop.set()

    async def _start_metrics(self) -> None:
        """The metrics port, on this loop (broker.metrics.endpoint), loopback only."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ControllerCollector(lambda: self.apis.state if self.apis else None,
                                              self.request_metrics, self.login_failures))
        config = self.config
        self.metrics = MetricsEndpoint(registry, config.metrics_host, config.metrics_port,
                                       config.metrics_max_connections,
                                       config.request_read_timeout_ms / 1000)
        await self.metrics.start()
        log.info("controller: metrics on http://%s:%d/metrics", config.metrics_host,
                 self.metrics.port)

    async def _tick_loop(self, apis: ControllerApis) -> None:
        interval_s = self.config.controller_tick_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            if not apis.active:
                continue  # a quorum's voter that is not the active controller
            with contextlib.suppress(NotCommittedError):  # the next tick tries again
                await apis.commit(apis.state.tick())

    # -- connections --------------------------------------------------------------------

    async def _serve_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = self._admit(writer)
        if peer is None:
            writer.close()
            return
        if self.cluster_secret:  # a place held without a broker login is taken back
            peer.login_by = (asyncio.get_running_loop().time()
                             + self.config.request_read_timeout_ms / 1000)
        self._connections.add(task)
        try:
            while await self._serve_one(reader, writer, peer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except TimeoutError:
            log.info("closing connection %s: %s", writer.get_extra_info("peername"),
                     "request read timeout" if peer.reading else "answer not read in time")
        except ProtocolError as e:
            log.warning("closing connection %s: %s", writer.get_extra_info("peername"), e)
        except FatalControllerError as e:
            log.critical("%s", e)
        except Exception:  # a bug in a handler: drop this connection, keep serving
            log.exception("closing connection %s after an internal error",
                          writer.get_extra_info("peername"))
        finally:
            self._connections.discard(task)
            self._release(peer)
            writer.close()

    def _admit(self, writer: asyncio.StreamWriter) -> _Peer | None:
        """A place for a new connection: a client place while ``max_connections`` and
        ``max_connections_per_ip`` allow, else a reserved broker place (on probation),
        else None (refused)."""
        config = self.config
        address = writer.get_extra_info("peername")
        ip = str(address[0]) if isinstance(address, tuple) else str(address)
        limit = self._per_ip_overrides.get(ip, config.max_connections_per_ip)
        if self._clients < config.max_connections and self._per_ip.get(ip, 0) < limit:
            self._clients += 1
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
            return _Peer(ip, reserved=False)
        if self._reserved < config.reserved_broker_connections:
            self._reserved += 1
            return _Peer(ip, reserved=True)
        log.warning("refusing a connection from %s: client limits (max_connections %d, "
                    "max_connections_per_ip %d) and reserved_broker_connections %d reached",
                    ip, config.max_connections, limit, config.reserved_broker_connections)
        return None

    def _release(self, peer: _Peer) -> None:
        if peer.reserved:
            self._reserved -= 1
            return
        self._clients -= 1
        left = self._per_ip.get(peer.ip, 1) - 1
        if left > 0:
            self._per_ip[peer.ip] = left
        else:
            self._per_ip.pop(peer.ip, None)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         peer: _Peer) -> bool:
        config = self.config
        apis = self.apis
        assert apis is not None  # connections are served once the log is open
        # a reserved place is for brokers, which heartbeat well within their session
        idle_s = (config.broker_session_timeout_ms if peer.reserved
                  else config.connections_max_idle_ms) / 1000
        loop = asyncio.get_running_loop()
        if peer.login_by is not None:  # not logged in yet: the login deadline too
            idle_s = min(idle_s, peer.login_by - loop.time())
        peer.reading = False
        try:
            if idle_s <= 0:
                raise TimeoutError
            async with asyncio.timeout(idle_s):
                first = await reader.readexactly(1)
        except TimeoutError:
            late = peer.login_by is not None and loop.time() >= peer.login_by
            log.info("closing connection %s: %s", writer.get_extra_info("peername"),
                     "no broker login within request_read_timeout_ms" if late else "idle")
            return False
        except asyncio.IncompleteReadError:
            return False
        peer.reading = True
        async with asyncio.timeout(config.request_read_timeout_ms / 1000):
            try:
                head = first + await reader.readexactly(3)
            except asyncio.IncompleteReadError:
                raise ProtocolError("connection closed inside a frame length") from None
            frame = await reader.readexactly(frame_length_of(head, config.max_request_bytes))
        peer.reading = False
        started = time.monotonic()
        header = decode_request_header(frame)
        if header.body_offset < 0 and header.api_key == ApiKey.API_VERSIONS:
            api = APIS[ApiKey.API_VERSIONS]  # Kafka's v0 fallback answer
            body = {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": [
                {"api_key": int(api.key), "min_version": api.min_version,
                 "max_version": api.max_version}]}
            await self._write(writer, ApiKey.API_VERSIONS, 0, header.correlation_id, body)
            return True
        # with a secret: nothing but ApiVersions and the SASL exchange before a broker
        # login (only brokers can log in here), before any other look at the request
        if needs_login(bool(self.cluster_secret), peer.session, header.api_key):
            raise ProtocolError(f"{api_name(header.api_key)} before a broker login")
        over = check_request_bounds(header, max_metadata_topics=config.max_metadata_topics,
                                    max_fetch_partitions=config.max_fetch_partitions)
        if over is not None and header.api_key in (ApiKey.METADATA, ApiKey.FETCH):
            log.warning("connection %s: %s; answered without reading it",
                        writer.get_extra_info("peername"), over)
            if peer.probation:
                raise ProtocolError("a reserved broker place used by a client request")
            body = (dict(await apis.metadata({"topics": []}, header.api_version))
                    if header.api_key == ApiKey.METADATA
                    else {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                          "responses": []})
            await self._write(writer, header.api_key, header.api_version,
                              header.correlation_id, body)
            return True
        request = decode_request_body(header)
        if request.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            session = peer.session = peer.session or SaslSession(
                self.cluster_secret, decoy_key=self._decoy_key,
                failures=self.login_failures, address=peer.ip)
            had_failed = session.failed
            body = (session.handshake(request.body, request.api_version)
                    if request.api_key == ApiKey.SASL_HANDSHAKE
                    else session.authenticate(request.body))
            if is_internal(session.principal):  # a broker, or another voter
                peer.probation = False  # an authenticated broker keeps its reserved place
                peer.login_by = None
            failed = session.failed and not had_failed
            if failed:
                await self._delay_failed_login(writer, session)
            await self._write(writer, request.api_key, request.api_version,
                              request.correlation_id, body)
            return not failed  # a failed login's connection is closed once answered
        if self.cluster_secret:
            refusal = broker_request_refusal(peer.principal, request.api_key, request.body)
            if refusal is not None:
                if peer.probation:
                    raise ProtocolError(f"a reserved broker place used by a client: {refusal}")
                log.warning("connection %s: refused %s: %s", writer.get_extra_info("peername"),
                            APIS[request.api_key].name, refusal)
                await self._write(writer, request.api_key, request.api_version,
                                  request.correlation_id,
                                  _refusal_answer(request.api_key, request.api_version, refusal))
                return True
        quorum = apis.quorum
        if quorum is not None and _is_quorum_request(request.api_key, request.body,
                                                     list(quorum.voters)):
            if peer.probation:
                raise ProtocolError("a quorum request on a place reserved for brokers")
            # with a secret only a login of the cluster reaches here (needs_login); the
            # driver checks the sender is the voter it logged in as
            voter = controller_id_of(peer.principal) if self.cluster_secret else None
            body = quorum.driver.handle_request(request.api_key, request.api_version,
                                                request.body, voter)
            await self._write(writer, request.api_key, request.api_version,
                              request.correlation_id, body)
            return True
        handler = apis.handlers.get(request.api_key)
        if handler is None:
            raise ProtocolError(f"the controller does not serve {APIS[request.api_key].name}")
        if peer.probation and request.api_key != ApiKey.API_VERSIONS:
            if not _is_broker_request(request.api_key, request.body):
                raise ProtocolError(f"{APIS[request.api_key].name} on a place reserved for "
                                    "brokers (client connection limits reached)")
            peer.probation = False  # a broker's connection: keeps its reserved place
        try:
            body = await handler(request.body, request.api_version)
        except (FatalControllerError, ProtocolError):
            raise
        except Exception:  # a handler's bug: an error answer where the API has one
            log.exception("%s handler failed", APIS[request.api_key].name)
            answer = error_answer(request.api_key, request.api_version)
            if answer is None:
                raise
            body = answer
        self.request_metrics.on_response(request.api_key, started)
        await self._write(writer, request.api_key, request.api_version,
                          request.correlation_id, body)
        return True

    async def _delay_failed_login(self, writer: asyncio.StreamWriter,
                                  session: SaslSession) -> None:
        """Wait ``connection_failed_authentication_delay_ms`` before a failed login is
        answered (this connection's task only; at once when
        ``max_delayed_authentication_failures`` connections wait already)."""
        config = self.config
        log.log(logging.DEBUG if session.locked_out else logging.INFO,
                "connection %s: failed login %s; closing it",
                writer.get_extra_info("peername"), session.failure)
        delay_ms = config.connection_failed_authentication_delay_ms
        if not delay_ms or self._delaying >= config.max_delayed_authentication_failures:
            return
        self._delaying += 1
        try:
            await asyncio.sleep(delay_ms / 1000)
        finally:
            self._delaying -= 1

    async def _write(self, writer: asyncio.StreamWriter, api_key: int, version: int,
                     correlation_id: int, body: dict[str, Any]) -> None:
        """Encode and send an answer; a client that does not read it within
        ``connections_max_idle_ms`` is closed (TimeoutError)."""
        try:
            parts = encode_response(api_key, version, correlation_id, body)
        except MiniKafkaError:
            log.exception("cannot encode a %s v%d answer", APIS[api_key].name, version)
            answer = error_answer(api_key, version)
            if answer is None:
                raise
            parts = encode_response(api_key, version, correlation_id, answer)
        writer.writelines(parts)
        async with asyncio.timeout(self.config.connections_max_idle_ms / 1000):
            await writer.drain()


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m broker.controller",
                                     description="run the cluster controller in the foreground")
    parser.add_argument("--config", default=None, help="properties file (key=value lines)")
    parser.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="listen port (0: any free)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--node-id", type=int, default=None,
                        help="this controller's id among the quorum's voters (default 1)")
    parser.add_argument("--controller-quorum-voters", default=None, metavar="ID@HOST:PORT,...",
                        help="the quorum's voters, Kafka's controller.quorum.voters form "
                             "(default: this controller alone)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="any controller config key, e.g. broker_session_timeout_ms=3000")
    parser.add_argument("--log-level", default="INFO")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        overrides: dict[str, object] = dict(parse_overrides(args.override))
        for flag in ("host", "port", "data_dir", "node_id", "controller_quorum_voters"):
            if getattr(args, flag) is not None:
                overrides[flag] = getattr(args, flag)
        config = ControllerConfig.load(args.config, overrides)
        server = ControllerServer(config)
        return asyncio.run(server.serve(on_ready=lambda s: print(
            f"controller listening on {config.host}:{s.port}", flush=True)))
    except MiniKafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
