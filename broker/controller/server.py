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
  forwarded by brokers as their clients sent them (rules in
  :mod:`broker.controller.topics`).  CreateTopics answers ``configs`` null (Kafka's "not
  returned"): the forwarding broker fills them in from its catalog of defaults.
- Metadata: every registered broker with its ``fenced`` flag, partitions with
  ``unclean_elected``, topics with their ``configs`` (our tagged extras: flexible
  versions only, v9+); ``controller_id`` -1; topics asked by id only (v12) get
  UNKNOWN_TOPIC_ID; v0's empty list means every topic.
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

Every mutation follows one path with no ``await`` inside: core method -> records ->
``ControllerLog.append`` (fsync) -> wake waiting fetches -> answer.  If the append
fails the image is ahead of the disk, so the process logs the error and exits 1.

Not thread-safe: one event loop owns everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from broker.auth import (
    SaslSession,
    broker_request_refusal,
    needs_login,
    read_cluster_secret,
    scram_decoy_key,
)
from broker.config import parse_ip_overrides, parse_overrides
from broker.controller.config import ControllerConfig
from broker.controller.log import ControllerLog
from broker.controller.results import (
    ConfigOp,
    ConfigOperation,
    IsrChange,
    PartitionsSpec,
    ReplicaLog,
    ResourceChange,
    TopicSpec,
)
from broker.controller.state import ControllerState
from broker.login_failures import LoginFailureLimits, LoginFailures
from broker.metadata.records import (
    INTERNAL_LISTENER,
    METADATA_PARTITION,
    METADATA_TOPIC,
    METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    NO_LEADER,
    MetadataRecord,
)
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
from clients.protocol.scram import broker_id_of
from storage.meta_properties import check_data_dir_identity
from timer.clock import Clock, MonotonicClock

log = logging.getLogger(__name__)

ZERO_UUID = bytes(16)

Handler = Callable[[dict[str, Any], int], Awaitable[dict[str, Any]]]  # (body, version)


class FatalControllerError(Exception):
    """The metadata log could not be written: the process must stop."""


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
        self.store = ControllerLog(
            config.data_dir, snapshot_interval_records=config.metadata_snapshot_interval_records,
            max_batch_records=config.metadata_max_batch_records)
        self.state: ControllerState | None = None
        self.port = config.port
        self._appended = asyncio.Event()
        self._stop = asyncio.Event()
        self._fatal: BaseException | None = None
        self._connections: set[asyncio.Task[None]] = set()  # every connection's task
        self._clients = 0  # connections in client places
        self._reserved = 0  # connections in places reserved for brokers
        self._per_ip: dict[str, int] = {}  # client places by peer address
        self._per_ip_overrides = parse_ip_overrides(config.max_connections_per_ip_overrides)
        self._handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.BROKER_REGISTRATION: self._register,
            ApiKey.BROKER_HEARTBEAT: self._heartbeat,
            ApiKey.ALTER_PARTITION: self._alter_partition,
            ApiKey.ALLOCATE_PRODUCER_IDS: self._allocate_producer_ids,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._incremental_alter_configs,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.METADATA: self._metadata,
            ApiKey.FETCH: self._fetch,
        }

    @property
    def core(self) -> ControllerState:
        if self.state is None:
            raise RuntimeError("controller not started")
        return self.state

    # -- lifecycle ----------------------------------------------------------------------

    async def serve(self, on_ready: Callable[[ControllerServer], None] | None = None) -> int:
        image = self.store.open()
        log.info("metadata log open: %d records, snapshot %s", image.last_applied_offset + 1,
                 self.store.snapshot_loaded)
        self.state = ControllerState(self.config, self.clock, image)
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
            ticker = asyncio.create_task(self._tick_loop())
            if on_ready is not None:
                on_ready(self)
            await self._stop.wait()
            ticker.cancel()
        finally:
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            with contextlib.suppress(Exception):
                await server.wait_closed()
            self.store.close()
        if self._fatal is not None:
            log.critical("controller stopped: %s", self._fatal)
            return 1
        return 0

    def stop(self) -> None:
        self._stop.set()

    async def _tick_loop(self) -> None:
        interval_s = self.config.controller_tick_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            self._commit(self.core.tick())

    def _commit(self, records: list[MetadataRecord]) -> None:
        if not records:
            return
        try:
            self.store.append(records, self.core.image)
        except Exception as e:
            self._fatal = e
            self._stop.set()
            raise FatalControllerError(f"cannot write the metadata log: {e}") from e
        self._appended.set()
        self._appended = asyncio.Event()

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
            body = (await self._metadata({"topics": []}, header.api_version)
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
            if broker_id_of(session.principal) is not None:
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
        handler = self._handlers.get(request.api_key)
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

    # -- handlers -----------------------------------------------------------------------

    async def _api_versions(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        served = sorted({*self._handlers, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
        keys = [{"api_key": int(k), "min_version": APIS[k].min_version,
                 "max_version": APIS[k].max_version} for k in served]
        return {"error_code": 0, "api_keys": keys}

    async def _register(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        refused = _registration_error(body)
        if refused is not None:
            return {"error_code": int(refused[0]), "error_message": refused[1],
                    "broker_epoch": -1}
        listener = next(x for x in body["listeners"] if x["name"] != INTERNAL_LISTENER)
        internal = next(((x["host"], x["port"]) for x in body["listeners"]
                         if x["name"] == INTERNAL_LISTENER), None)
        result, records = self.core.register_broker(
            body["broker_id"], body["incarnation_id"].hex(), listener["host"],
            listener["port"], body["rack"], body["cluster_id"],
            [ReplicaLog(r["topic_name"], r["partition_index"], r["topic_id"],
                        r["last_leader_epoch"], r["log_end_offset"], r["recovery_cut"])
             for r in body["replica_logs"]], internal)
        self._commit(records)
        return {"error_code": int(result.error), "error_message": result.message,
                "broker_epoch": result.broker_epoch}

    async def _heartbeat(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        result, records = self.core.heartbeat(
            body["broker_id"], body["broker_epoch"], body["current_metadata_offset"],
            body["want_fence"], body["want_shut_down"])
        self._commit(records)
        return {"error_code": int(result.error), "error_message": result.message,
                "is_caught_up": result.is_caught_up, "is_fenced": result.is_fenced,
                "should_shut_down": result.should_shut_down,
                "report_replica_logs": result.report_replica_logs}

    async def _alter_partition(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        changes = [IsrChange(t["name"], p["partition_index"], p["leader_epoch"], p["new_isr"],
                             p["partition_epoch"])
                   for t in body["topics"] for p in t["partitions"]]
        (error, results), records = self.core.alter_partition(
            body["broker_id"], body["broker_epoch"], changes)
        self._commit(records)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in results:
            s = r.state
            by_topic.setdefault(r.topic, []).append({
                "partition_index": r.partition, "error_code": int(r.error),
                "error_message": r.message, "leader_id": s.leader if s else NO_LEADER,
                "leader_epoch": s.leader_epoch if s else -1, "isr": list(s.isr) if s else [],
                "partition_epoch": s.partition_epoch if s else -1})
        return {"error_code": int(error),
                "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def _allocate_producer_ids(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        result, records = self.core.allocate_producer_ids(body["broker_id"],
                                                          body["broker_epoch"])
        self._commit(records)  # fsync'd before the block is handed out
        return {"error_code": int(result.error), "error_message": result.message,
                "producer_id_start": result.producer_id_start,
                "producer_id_len": result.producer_id_len}

    async def _create_topics(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        specs = [TopicSpec(t["name"], t["num_partitions"], t["replication_factor"],
                           {a["partition_index"]: a["broker_ids"] for a in t["assignments"]},
                           [(c["name"], c["value"]) for c in t["configs"]])
                 for t in body["topics"]]
        results, records = self.core.create_topics(specs, body["validate_only"])
        self._commit(records)
        # configs stay null (Kafka: "not returned"): the forwarding broker fills them in
        # from its catalog of defaults, which the controller does not have
        return {"throttle_time_ms": 0, "topics": [
            {"name": r.name, "error_code": int(r.error), "error_message": r.message,
             "num_partitions": r.num_partitions, "replication_factor": r.replication_factor,
             "configs": None} for r in results]}

    async def _delete_topics(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        results, records = self.core.delete_topics(body["topic_names"])
        self._commit(records)
        return {"throttle_time_ms": 0, "responses": [
            {"name": r.name, "error_code": int(r.error), "error_message": r.message}
            for r in results]}

    async def _create_partitions(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        specs = [PartitionsSpec(t["name"], t["count"], None if t["assignments"] is None
                                else [a["broker_ids"] for a in t["assignments"]])
                 for t in body["topics"]]
        results, records = self.core.create_partitions(specs, body["validate_only"])
        self._commit(records)
        return {"throttle_time_ms": 0, "results": [
            {"name": r.name, "error_code": int(r.error), "error_message": r.message}
            for r in results]}

    async def _incremental_alter_configs(self, body: dict[str, Any],
                                         version: int) -> dict[str, Any]:
        return self._alter_configs_answer(body, incremental=True)

    async def _alter_configs(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        return self._alter_configs_answer(body, incremental=False)

    def _alter_configs_answer(self, body: dict[str, Any], incremental: bool) -> dict[str, Any]:
        resources = [ResourceChange(r["resource_type"], r["resource_name"], [
            ConfigOp(c["name"], c.get("config_operation", ConfigOperation.SET), c["value"])
            for c in r["configs"]]) for r in body["resources"]]
        results, records = self.core.alter_configs(resources, body["validate_only"],
                                                   incremental)
        self._commit(records)
        return {"throttle_time_ms": 0, "responses": [
            {"error_code": int(r.error), "error_message": r.message,
             "resource_type": r.resource_type, "resource_name": r.name} for r in results]}

    async def _metadata(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        image = self.core.image
        brokers = [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack,
                    "fenced": b.fenced} for _, b in sorted(image.brokers.items())]
        wanted = body["topics"]
        asked: list[dict[str, Any]] = ([{"name": n} for n in sorted(image.topics)]
                                       if wanted is None or (not wanted and version == 0)
                                       else wanted)
        topics: list[dict[str, Any]] = []
        for entry in asked:
            name = entry["name"]
            info = image.topics.get(name) if name is not None else None
            if info is None:
                code = (ErrorCode.UNKNOWN_TOPIC_ID if name is None
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                topics.append({"error_code": int(code), "name": name,
                               "topic_id": entry.get("topic_id", ZERO_UUID), "partitions": []})
                continue
            parts = []
            for index, s in sorted(info.partitions.items()):
                no_leader = s.leader == NO_LEADER
                parts.append({
                    "error_code": int(ErrorCode.LEADER_NOT_AVAILABLE if no_leader
                                      else ErrorCode.NONE),
                    "partition_index": index, "leader_id": s.leader,
                    "leader_epoch": s.leader_epoch, "replica_nodes": list(s.replicas),
                    "isr_nodes": list(s.isr),
                    "offline_replicas": [b for b in s.replicas if not image.is_alive(b)],
                    "unclean_elected": s.unclean_elected,
                    "offline_reason": (self.core.offline_reasons.get((name, index))
                                       if no_leader else None)})
            topics.append({"error_code": 0, "name": name, "partitions": parts,
                           "configs": [{"name": k, "value": v}
                                       for k, v in sorted(info.configs.items())]})
        return {"throttle_time_ms": 0, "brokers": brokers, "cluster_id": self.config.cluster_id,
                "controller_id": -1, "topics": topics}

    async def _fetch(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        if body["session_epoch"] not in (0, -1):  # incremental fetch: we keep no sessions
            return {"throttle_time_ms": 0, "session_id": 0, "responses": [],
                    "error_code": int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)}
        wanted = [(t["name"], p) for t in body["topics"] for p in t["partitions"]]
        ours = [p for name, p in wanted
                if name == METADATA_TOPIC and p["partition"] == METADATA_PARTITION]
        wait_ms = min(max(body["max_wait_ms"], 0), self.config.max_fetch_wait_ms)
        if ours and wait_ms > 0 and len(ours) == len(wanted) and all(
                p["fetch_offset"] == self.store.log_end_offset for p in ours):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._appended.wait(), wait_ms / 1000)
        budget = max(body["max_bytes"], 0)
        responses: dict[str, list[dict[str, Any]]] = {}
        for name, p in wanted:
            entry = self._fetch_partition(name, p, budget)
            budget = max(0, budget - len(entry["records"]))
            responses.setdefault(name, []).append(entry)
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                "responses": [{"name": n, "partitions": ps} for n, ps in responses.items()]}

    def _fetch_partition(self, name: str, p: dict[str, Any], budget: int) -> dict[str, Any]:
        leo = self.store.log_end_offset
        entry: dict[str, Any] = {"partition_index": p["partition"], "error_code": 0,
                                 "high_watermark": leo, "last_stable_offset": leo,
                                 "log_start_offset": 0, "records": b""}
        error = None
        if name != METADATA_TOPIC or p["partition"] != METADATA_PARTITION:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif not 0 <= p["fetch_offset"] <= leo:
            error = ErrorCode.OFFSET_OUT_OF_RANGE
        elif p["fetch_offset"] < leo:
            entry["records"] = self.store.read(p["fetch_offset"],
                                               min(budget, max(p["partition_max_bytes"], 0)))
        if error is not None:  # Kafka's error entry: no offsets
            entry.update(error_code=int(error), high_watermark=-1, last_stable_offset=-1,
                         log_start_offset=-1)
        return entry


def _registration_error(body: dict[str, Any]) -> tuple[ErrorCode, str] | None:
    """Why a BrokerRegistration is refused before it reaches the state: no listener, or a
    broker that cannot read this controller's metadata records (Kafka checks its
    finalized ``metadata.version`` the same way, with UNSUPPORTED_VERSION)."""
    names = [x["name"] for x in body["listeners"]]
    if names.count(INTERNAL_LISTENER) > 1 or len(names) - names.count(INTERNAL_LISTENER) != 1:
        return (ErrorCode.INVALID_REQUEST, "a broker registration needs one client listener "
                f"and at most one {INTERNAL_LISTENER} listener, got {names}")
    for feature in body["features"]:
        if feature["name"] == METADATA_VERSION_FEATURE:
            low, high = feature["min_supported_version"], feature["max_supported_version"]
            if low <= METADATA_VERSION <= high:
                return None
            return (ErrorCode.UNSUPPORTED_VERSION, f"the broker reads {METADATA_VERSION_FEATURE}"
                    f" {low}..{high}, the controller writes {METADATA_VERSION}")
    return (ErrorCode.UNSUPPORTED_VERSION,
            f"the broker does not declare the feature {METADATA_VERSION_FEATURE}")


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m broker.controller",
                                     description="run the cluster controller in the foreground")
    parser.add_argument("--config", default=None, help="properties file (key=value lines)")
    parser.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="listen port (0: any free)")
    parser.add_argument("--data-dir", default=None)
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
        for flag in ("host", "port", "data_dir"):
            if getattr(args, flag) is not None:
                overrides[flag] = getattr(args, flag)
        config = ControllerConfig.load(args.config, overrides)
        server = ControllerServer(config)
        return asyncio.run(server.serve(on_ready=lambda s: print(
            f"controller listening on {config.host}:{s.port}", flush=True)))
    except MiniKafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
