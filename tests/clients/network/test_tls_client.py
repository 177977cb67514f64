"""Client TLS (``security_protocol`` SSL / SASL_SSL) against in-process TLS servers.

No broker of ours: certificates come from :func:`tests.tls_certs.make_certs`; the
servers are the fake cluster of :mod:`tests.clients.fake_broker` (with the group APIs)
behind TLS, plus SaslHandshake / SaslAuthenticate with SCRAM-SHA-256 for SASL_SSL, and,
for single behaviours, tiny threaded TLS servers answering with frames built by
:mod:`clients.protocol.codec`.  Covered: :func:`ssl_context_of` and its config errors;
a connection's TLS handshake, ApiVersions and round trips (responses far above 64 KiB,
pipelined requests; bytes the TLS layer decrypted ahead, which wake no selector);
certificate failures (unknown CA, host name, a client certificate refused) as precise
:class:`SslAuthenticationError` within the connect timeout; a handshake that never
completes; TLS against a plaintext listener and the reverse; coalesced sends; the
Producer, Consumer (with a group) and Admin over SSL and SASL_SSL.

Every server thread and socket is stopped in a ``finally`` or a fixture; nothing
sleeps to wait.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.network.connection import BrokerConnection, NetworkError
from clients.network.node_connections import metadata_request
from clients.network.sasl import SaslLogin, sasl_login_of
from clients.network.tls import SslAuthenticationError, ssl_context_of
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request_body, decode_request_header, encode_response
from clients.protocol.errors import AuthenticationError, InvalidConfigError
from clients.protocol.framing import read_frame, send_buffers
from clients.protocol.registry import APIS
from clients.protocol.scram import ScramError, ScramServer, make_credential
from clients.protocol.topics import TopicPartition
from clients.types import ConsumerRecord, NewTopic
from tests.clients.consumer.fake_group_coordinator import FakeGroupCluster
from tests.clients.fake_broker import E, FakeCluster
from tests.tls_certs import Certs, make_certs

USER, PASSWORD = "alice", "a long password"


# ---------------------------------------------------------------- certificates, contexts
@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Certs]:
    root = tmp_path_factory.mktemp("tls")
    return {
        "ok": make_certs(root / "ok"),
        "other": make_certs(root / "other", ca_name="some other CA"),
        "misnamed": make_certs(root / "misnamed", server_hosts=("broker.example",)),
        "encrypted": make_certs(root / "encrypted", client_key_password="key password"),
    }


@pytest.fixture(scope="module")
def certs(pki: dict[str, Certs]) -> Certs:
    return pki["ok"]


def server_context(certs: Certs, *, client_ca: Path | None = None) -> ssl.SSLContext:
    """A server context; with ``client_ca`` it requires a client certificate from it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs.server_cert, certs.server_key)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(client_ca)
    return ctx


def client_context(certs: Certs, **kw: Any) -> ssl.SSLContext:
    settings: dict[str, Any] = {"ssl_cafile": str(certs.ca), "ssl_certfile": None,
                                "ssl_keyfile": None, "ssl_password": None,
                                "ssl_check_hostname": True, "ssl_context": None}
    settings.update(kw)
    ctx = ssl_context_of("SSL", **settings)
    assert ctx is not None
    return ctx


# ---------------------------------------------------------------- servers
class TlsFakeCluster(FakeGroupCluster):
    """The fake cluster (group APIs included) with TLS on every accepted connection and
    SCRAM-SHA-256 logins (SaslHandshake v1 + SaslAuthenticate) for ``alice``.

    The handshake runs on the connection's own thread; failed handshakes are recorded
    in ``handshake_errors``, successful logins in ``logins``.  Logging in is not
    enforced (this fake serves anyone); tests check ``logins``.
    """

    def __init__(self, context: ssl.SSLContext, num_brokers: int = 1) -> None:
        self.context = context
        self.handshake_errors: list[str] = []
        self.logins: list[str] = []
        self.credential = make_credential("SCRAM-SHA-256", PASSWORD.encode())
        self._session = threading.local()  # one thread per connection: its SCRAM state
        super().__init__(num_brokers, join_window_s=0.2)

    def _serve(self, node_id: int, conn: socket.socket) -> None:
        tls = self.context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        with self.cond:  # close() must reach the wrapped socket (``conn`` is detached)
            self._conns[self._conns.index(conn)] = tls
            stopping = self._stopping
        try:
            if stopping:
                raise OSError("stopping")
            tls.settimeout(10)
            tls.do_handshake()
            tls.settimeout(None)
        except OSError as e:
            with self.cond:
                self.handshake_errors.append(str(e))
            # A certificate refused: close late, as Kafka does after a failed
            # authentication (connection.failed.authentication.delay.ms); closing with
            # the client's first request unread would reset the connection, and the
            # reset can discard the alert before the client reads it.
            if isinstance(e, ssl.SSLError) and "CERTIFICATE" in str(e.reason):
                with contextlib.suppress(OSError):
                    tls.settimeout(5)
                    while socket.socket.recv(tls, 65536):  # raw, until the client closes
                        pass
            with self.cond:
                self._conns.remove(tls)
            tls.close()
            return
        super()._serve(node_id, tls)

    def _handle(self, node_id: int, api_key: ApiKey, body: dict[str, Any],
                version: int) -> dict[str, Any] | None:
        if api_key == ApiKey.SASL_HANDSHAKE:
            ok = body["mechanism"] == "SCRAM-SHA-256"
            self._session.scram = ScramServer(
                "SCRAM-SHA-256", lambda name: self.credential if name == USER else None)
            return {"error_code": 0 if ok else E.UNSUPPORTED_SASL_MECHANISM,
                    "mechanisms": ["SCRAM-SHA-256"]}
        if api_key == ApiKey.SASL_AUTHENTICATE:
            scram: ScramServer = self._session.scram
            token = bytes(body["auth_bytes"])
            try:
                answer = scram.final(token) if scram.started else scram.first(token)
            except ScramError as e:
                return {"error_code": E.SASL_AUTHENTICATION_FAILED, "error_message": str(e),
                        "auth_bytes": b"", "session_lifetime_ms": 0}
            if scram.username is not None:
                with self.cond:
                    self.logins.append(scram.username)
            return {"error_code": 0, "error_message": None, "auth_bytes": answer,
                    "session_lifetime_ms": 0}
        return super()._handle(node_id, api_key, body, version)


@contextlib.contextmanager
def tls_cluster(context: ssl.SSLContext, num_brokers: int = 1) -> Iterator[TlsFakeCluster]:
    cluster = TlsFakeCluster(context, num_brokers)
    try:
        yield cluster
    finally:
        cluster.close()
    assert cluster.errors == [], "the fake received requests it could not serve"


@contextlib.contextmanager
def one_connection_server(
    handler: Callable[[socket.socket, threading.Event], None],
) -> Iterator[int]:
    """A listener on 127.0.0.1:0 whose thread runs ``handler(conn, stop)`` on the first
    connection; yields the port.  Exit sets ``stop``, closes every socket, joins."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def run() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        accepted.append(conn)
        with contextlib.suppress(OSError):
            handler(conn, stop)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        for conn in accepted:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        thread.join(10)
        for conn in accepted:
            conn.close()
        assert not thread.is_alive()


def connection(port: int, ctx: ssl.SSLContext | None, host: str = "127.0.0.1",
               **kw: Any) -> BrokerConnection:
    settings: dict[str, Any] = {"client_id": "tls-test", "request_timeout_ms": 10_000,
                                "connect_timeout_ms": 5_000}
    settings.update(kw)
    return BrokerConnection(host, port, ssl_context=ctx, **settings)


# ---------------------------------------------------------------- settings
def test_ssl_context_of_builds_a_verifying_client_context(certs: Certs) -> None:
    ctx = client_context(certs)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert not client_context(certs, ssl_check_hostname=False).check_hostname
    assert client_context(certs).verify_mode == ssl.CERT_REQUIRED  # CA still checked
    lower = ssl_context_of("sasl_ssl", str(certs.ca), str(certs.client_cert),
                           str(certs.client_key), None, True, None)
    assert lower is not None and lower.check_hostname
    mine = ssl.create_default_context()
    assert ssl_context_of("SSL", None, None, None, None, True, mine) is mine
    for protocol in ("PLAINTEXT", "SASL_PLAINTEXT", "plaintext"):
        assert ssl_context_of(protocol, None, None, None, None, True, None) is None


def test_ssl_context_of_names_the_bad_setting(pki: dict[str, Certs], tmp_path: Path) -> None:
    ok, other, enc = pki["ok"], pki["other"], pki["encrypted"]
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cases: list[tuple[tuple[Any, ...], str]] = [
        (("TLS", None, None, None, None, True, None), "security_protocol must be one of "
         "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, got 'TLS'"),
        (("PLAINTEXT", str(ok.ca), None, None, None, True, None),
         "ssl_cafile need security_protocol='SSL' or 'SASL_SSL'"),
        (("SASL_PLAINTEXT", None, None, None, None, False, None),
         "ssl_check_hostname=False need security_protocol='SSL'"),
        (("PLAINTEXT", None, None, None, None, True, ssl.create_default_context()),
         "ssl_context need security_protocol"),
        (("SSL", None, str(tmp_path / "missing.pem"), None, None, True, None),
         "ssl_certfile='.*missing.pem' cannot be read: No such file"),
        (("SSL", str(tmp_path), None, None, None, True, None),
         "ssl_cafile='.*' cannot be read: Is a directory"),
        (("SSL", str(ok.client_key), None, None, None, True, None),
         "ssl_cafile='.*client.key' holds no usable PEM CA certificate"),
        (("SSL", None, None, str(ok.client_key), None, True, None),
         "ssl_keyfile needs ssl_certfile"),
        (("SSL", None, None, None, "pw", True, None), "ssl_password needs ssl_certfile"),
        (("SSL", None, str(ok.client_cert), str(other.client_key), None, True, None),
         "ssl_keyfile='.*other/client.key' is not the private key of the certificate"),
        (("SSL", None, str(ok.client_cert), None, None, True, None),
         "cannot load the client certificate from ssl_certfile='.*' \\(not a PEM"),
        (("SSL", None, str(enc.client_cert), str(enc.client_key), None, True, None),
         "ssl_keyfile='.*encrypted/client.key': the private key is encrypted; set "
         "ssl_password"),
        (("SSL", None, str(enc.client_cert), str(enc.client_key), "wrong", True, None),
         "wrong ssl_password"),
        (("SSL", str(ok.ca), None, None, None, True, ssl.create_default_context()),
         "ssl_context is used as given: leave ssl_cafile unset"),
        (("SSL", None, None, None, None, False, ssl.create_default_context()),
         "leave ssl_check_hostname=False unset"),
        (("SSL", None, None, None, None, True, server_side), "server context"),
        (("SSL", None, None, None, None, True, "not a context"),
         "ssl_context must be an ssl.SSLContext, got str"),
    ]
    for args, message in cases:
        with pytest.raises(InvalidConfigError, match=message):
            ssl_context_of(*args)
    ctx = ssl_context_of("SSL", str(enc.ca), str(enc.client_cert), str(enc.client_key),
                         "key password", True, None)
    assert ctx is not None


def test_sasl_login_of_takes_the_tls_protocols() -> None:
    assert sasl_login_of("SSL", None, None, None) is None
    assert sasl_login_of("ssl", None, None, None) is None
    login = sasl_login_of("SASL_SSL", "SCRAM-SHA-512", USER, PASSWORD)
    assert login == SaslLogin("SCRAM-SHA-512", USER, PASSWORD.encode())
    with pytest.raises(InvalidConfigError, match=r"sasl_\* settings \(sasl_mechanism\) need "
                       "security_protocol='SASL_PLAINTEXT' or 'SASL_SSL'"):
        sasl_login_of("SSL", "SCRAM-SHA-256", None, None)
    with pytest.raises(InvalidConfigError, match="SASL_SSL needs sasl_plain_username"):
        sasl_login_of("SASL_SSL", "SCRAM-SHA-256", USER, None)
    with pytest.raises(InvalidConfigError, match="security_protocol must be one of"):
        sasl_login_of("TLS", None, None, None)


def test_clients_refuse_bad_tls_settings_at_construction(certs: Certs) -> None:
    for make in (Producer, Consumer, Admin):
        with pytest.raises(InvalidConfigError, match="ssl_cafile need security_protocol"):
            make("127.0.0.1:1", ssl_cafile=str(certs.ca))
        with pytest.raises(InvalidConfigError, match=r"ssl_certfile='/nonexistent\.pem'"):
            make("127.0.0.1:1", security_protocol="SSL", ssl_certfile="/nonexistent.pem")


# ---------------------------------------------------------------- one connection
def test_connection_speaks_kafka_over_tls(certs: Certs) -> None:
    with tls_cluster(server_context(certs)) as fake:
        for i in range(3000):  # a Metadata answer of ~350 KB: many TLS records
            fake.create_topic(f"topic-with-a-rather-long-name-number-{i:05d}")
        for host in ("127.0.0.1", "localhost"):  # the certificate names both
            conn = connection(fake.port(0), client_context(certs), host=host)
            try:
                conn.connect()
                sock = conn._sock
                assert isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2",
                                                                              "TLSv1.3")
                assert conn.api_versions[int(ApiKey.METADATA)][1] >= 1
                small = conn.request(ApiKey.METADATA, lambda v: metadata_request([], v))
                assert small["topics"] == [] and small["cluster_id"] == "fake-cluster"
                big = conn.request(ApiKey.METADATA, lambda v: metadata_request(None, v))
                assert len(big["topics"]) == 3000
                # several requests in flight: answers arrive back to back
                sent = [conn.send(ApiKey.METADATA, lambda v: metadata_request(None, v))
                        for _ in range(3)]
                sent.append(conn.send(ApiKey.METADATA, lambda v: metadata_request([], v)))
                answers = []
                deadline = time.monotonic() + 30
                while len(answers) < 4 and time.monotonic() < deadline:
                    answers += conn.poll(1000)
                assert [a.request for a in answers] == sent
                assert all(a.error is None and a.body is not None for a in answers)
                assert [len(a.body["topics"]) for a in answers if a.body] == [3000] * 3 + [0]
                assert conn.buffered_input == 0  # every decrypted byte was handed out
            finally:
                conn.close()
    assert fake.handshake_errors == []


def _pre_answering_server(ctx: ssl.SSLContext) -> Callable[
        [socket.socket, threading.Event], None]:
    """Answers ApiVersions, and in the same TLS record the first Metadata request still
    to come (correlation id 0), then reads that request and stays silent."""
    metadata_version = APIS[ApiKey.METADATA].max_version

    def handle(raw: socket.socket, stop: threading.Event) -> None:
        with ctx.wrap_socket(raw, server_side=True) as tls:
            frame = read_frame(tls)
            assert frame is not None
            request = decode_request_body(decode_request_header(frame))
            versions = {"error_code": 0, "api_keys": [
                {"api_key": int(ApiKey.API_VERSIONS), "min_version": 0, "max_version": 3},
                {"api_key": int(ApiKey.METADATA), "min_version": metadata_version,
                 "max_version": metadata_version}]}
            metadata = {"brokers": [], "cluster_id": "early", "controller_id": -1,
                        "topics": []}
            record = b"".join([
                *encode_response(ApiKey.API_VERSIONS, request.api_version,
                                 request.correlation_id, versions),
                *encode_response(ApiKey.METADATA, metadata_version, 0, metadata)])
            tls.sendall(record)  # one write, one TLS record (a few hundred bytes)
            read_frame(tls)  # the Metadata request, already answered
            stop.wait(30)

    return handle


def test_bytes_decrypted_ahead_are_read_without_a_selector_wakeup(certs: Certs) -> None:
    with one_connection_server(_pre_answering_server(server_context(certs))) as port:
        conn = connection(port, client_context(certs), request_timeout_ms=5_000)
        try:
            conn.connect()
            # the Metadata answer sits decrypted in the TLS layer; the socket is empty
            assert conn.buffered_input > 0
            started = time.monotonic()
            body = conn.request(ApiKey.METADATA, lambda v: metadata_request([], v))
            assert body["cluster_id"] == "early"
            assert time.monotonic() - started < 2.5  # not the 5 s request timeout
            assert conn.buffered_input == 0
        finally:
            conn.close()


class _BioServer:
    """The server side of TLS over memory BIOs on a raw socket, so a test decides which
    encrypted bytes reach the wire and when."""

    def __init__(self, ctx: ssl.SSLContext, raw: socket.socket) -> None:
        self.raw = raw
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_side=True)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.flush()
                self._pump()
        self.flush()

    def _pump(self) -> None:
        data = self.raw.recv(65536)
        if not data:
            raise EOFError("the client closed")
        self.incoming.write(data)

    def flush(self, keep: int = 0) -> bytes:
        """Send what TLS wrote, except its last ``keep`` bytes (returned)."""
        data = self.outgoing.read()
        cut = len(data) - keep
        self.raw.sendall(data[:cut])
        return data[cut:]

    def read_frame(self) -> memoryview:
        buf = bytearray()
        while True:
            with contextlib.suppress(ssl.SSLWantReadError):
                buf += self.tls.read(65536)
            if len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                return memoryview(buf)[4:]
            self._pump()

    def answer(self, api_key: ApiKey, body: dict[str, Any]) -> int:
        """Encrypt the answer to the next request; returns its version."""
        request = decode_request_body(decode_request_header(self.read_frame()))
        self.tls.write(b"".join(encode_response(api_key, request.api_version,
                                                request.correlation_id, body)))
        return request.api_version


def test_a_record_still_in_transit_does_not_block_the_reader(certs: Certs) -> None:
    """Half of the last TLS record of a big answer arrives; ``poll`` must return at its
    timeout (the reader must not block in the TLS layer waiting for the rest, which
    would stall a sender thread for ``request_timeout_ms``), then finish the answer."""
    half_sent, release = threading.Event(), threading.Event()
    version = APIS[ApiKey.METADATA].max_version
    topics = [{"error_code": 0, "name": f"t{i:05d}", "partitions": []} for i in range(5000)]

    def handle(raw: socket.socket, stop: threading.Event) -> None:
        server = _BioServer(server_context(certs), raw)
        server.answer(ApiKey.API_VERSIONS, {"error_code": 0, "api_keys": [
            {"api_key": int(ApiKey.API_VERSIONS), "min_version": 0, "max_version": 3},
            {"api_key": int(ApiKey.METADATA), "min_version": version,
             "max_version": version}]})
        server.flush()
        server.answer(ApiKey.METADATA, {"brokers": [], "cluster_id": "slow",
                                        "controller_id": -1, "topics": topics})
        rest = server.flush(keep=100)  # the last record, cut short
        half_sent.set()
        if release.wait(30):
            raw.sendall(rest)
        stop.wait(30)

    with one_connection_server(handle) as port:
        conn = connection(port, client_context(certs), request_timeout_ms=20_000)
        try:
            conn.connect()
            request = conn.send(ApiKey.METADATA, lambda v: metadata_request(None, v))
            assert half_sent.wait(10)
            started = time.monotonic()
            got = conn.poll(300)
            while not got and time.monotonic() - started < 0.3:
                got = conn.poll(300)
            assert got == [] and time.monotonic() - started < 5  # not 20 s blocked
            assert conn.connected and conn.in_flight_count == 1
            release.set()
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                got = conn.poll(1000)
            assert [r.request for r in got] == [request]
            assert got[0].body is not None and len(got[0].body["topics"]) == 5000
        finally:
            release.set()
            conn.close()


def test_a_close_right_after_the_handshake_hints_at_client_certificates(
        certs: Certs) -> None:
    def handle(raw: socket.socket, stop: threading.Event) -> None:
        with server_context(certs).wrap_socket(raw, server_side=True) as tls:
            read_frame(tls)  # the ApiVersions request; then close without an answer

    with one_connection_server(handle) as port:
        conn = connection(port, client_context(certs))
        with pytest.raises(NetworkError, match="closed right after the TLS handshake: if the "
                                               "broker requires client certificates"):
            conn.connect()


def test_send_buffers_coalesces_small_buffers_for_tls(certs: Certs,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = socket.socketpair()
    server_ctx = server_context(certs)
    done: list[ssl.SSLSocket] = []
    thread = threading.Thread(
        target=lambda: done.append(server_ctx.wrap_socket(a, server_side=True)), daemon=True)
    thread.start()
    client = client_context(certs, ssl_check_hostname=False).wrap_socket(b)
    thread.join(10)
    server = done[0]
    try:
        writes: list[int] = []
        real_sendall = client.sendall

        def sendall(data: Any, flags: int = 0) -> None:
            writes.append(memoryview(data).nbytes)
            real_sendall(data, flags)

        monkeypatch.setattr(client, "sendall", sendall)
        buffers = [b"a" * 5] * 1000 + [bytearray(b"b" * 300_000)] + [b""] + [b"c" * 7] * 10
        expected = b"".join(buffers)
        received = bytearray()
        reader = threading.Thread(target=lambda: received.extend(
            _recv_exactly(server, len(expected))), daemon=True)
        reader.start()
        assert send_buffers(client, buffers) == len(expected)
        reader.join(10)
        assert bytes(received) == expected
        assert writes == [5000, 300_000, 70]  # joined small ones; the big one alone
    finally:
        client.close()
        server.close()


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


# ---------------------------------------------------------------- failures
def test_unknown_ca_is_a_precise_error_within_the_connect_timeout(
        pki: dict[str, Certs]) -> None:
    with tls_cluster(server_context(pki["ok"])) as fake:
        port = fake.port(0)
        conn = connection(port, client_context(pki["other"]), connect_timeout_ms=3_000)
        started = time.monotonic()
        with pytest.raises(SslAuthenticationError) as info:
            conn.connect()
        assert time.monotonic() - started < 3.0
        assert not conn.connected
    message = str(info.value)
    assert isinstance(info.value, AuthenticationError) and not info.value.retriable
    assert f"node -1 at 127.0.0.1:{port}: TLS: unable to get local issuer" in message
    assert "is its CA in ssl_cafile?" in message


def test_clients_surface_a_refused_certificate(pki: dict[str, Certs]) -> None:
    wrong_ca: dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": str(pki["other"].ca)}
    with tls_cluster(server_context(pki["ok"])) as fake:
        fake.create_topic("t")
        with Producer(fake.bootstrap, linger_ms=0, max_block_ms=5000, **wrong_ca) as producer:
            with pytest.raises(SslAuthenticationError, match="unable to get local issuer"):
                producer.send("t", b"never").result(10)
            with pytest.raises(SslAuthenticationError):  # fatal: no retrying
                producer.send("t", b"never either")
        with Consumer(fake.bootstrap, **wrong_ca) as consumer:
            consumer.assign([TopicPartition("t", 0)])
            with pytest.raises(SslAuthenticationError, match="is its CA in ssl_cafile"):
                consumer.poll(1000)
        with (Admin(fake.bootstrap, **wrong_ca) as admin,
              pytest.raises(SslAuthenticationError)):
            admin.list_topics()


def test_host_name_mismatch_unless_check_hostname_is_off(pki: dict[str, Certs]) -> None:
    misnamed = pki["misnamed"]  # a certificate for broker.example only
    with tls_cluster(server_context(misnamed)) as fake:
        conn = connection(fake.port(0), client_context(misnamed))
        with pytest.raises(SslAuthenticationError,
                           match=r"IP address mismatch.*does not name the host connected to"):
            conn.connect()
        conn = connection(fake.port(0), client_context(misnamed, ssl_check_hostname=False))
        try:
            conn.connect()
            assert conn.request(ApiKey.METADATA, lambda v: metadata_request([], v))
        finally:
            conn.close()


def test_mutual_tls(pki: dict[str, Certs]) -> None:
    ok, other, enc = pki["ok"], pki["other"], pki["encrypted"]
    with tls_cluster(server_context(ok, client_ca=ok.ca)) as fake:
        with_cert = client_context(ok, ssl_certfile=str(ok.client_cert),
                                   ssl_keyfile=str(ok.client_key))
        conn = connection(fake.port(0), with_cert)
        try:
            conn.connect()
            assert conn.request(ApiKey.METADATA, lambda v: metadata_request([], v))
        finally:
            conn.close()
        for ctx, reason in (
            (client_context(ok), "CERTIFICATE_REQUIRED"),  # no certificate at all
            (client_context(ok, ssl_certfile=str(other.client_cert),
                            ssl_keyfile=str(other.client_key)), "UNKNOWN_CA"),
        ):
            conn = connection(fake.port(0), ctx, connect_timeout_ms=3_000)
            started = time.monotonic()
            with pytest.raises(SslAuthenticationError,
                               match=f"the broker refused our certificate .*{reason}"):
                conn.connect()
            assert time.monotonic() - started < 3.0 and not conn.connected
    with tls_cluster(server_context(ok, client_ca=enc.ca)) as fake:  # an encrypted key
        ctx = client_context(ok, ssl_certfile=str(enc.client_cert),
                             ssl_keyfile=str(enc.client_key), ssl_password="key password")
        conn = connection(fake.port(0), ctx)
        try:
            conn.connect()
        finally:
            conn.close()


def test_a_handshake_that_never_completes_times_out(certs: Certs) -> None:
    # a listener nobody accepts from: the TCP connect succeeds, the ClientHello waits
    with socket.create_server(("127.0.0.1", 0)) as silent:
        conn = connection(silent.getsockname()[1], client_context(certs),
                          connect_timeout_ms=300)
        started = time.monotonic()
        with pytest.raises(NetworkError, match="TLS handshake not finished within "
                                               "connect_timeout_ms=300"):
            conn.connect()
        assert 0.2 < time.monotonic() - started < 3.0


def test_tls_and_plaintext_mismatch(certs: Certs) -> None:
    plain = FakeCluster(1)  # a plaintext listener: the ClientHello reads as a huge frame
    try:
        conn = connection(plain.port(0), client_context(certs), connect_timeout_ms=3_000)
        with pytest.raises(NetworkError, match=r"TLS handshake failed: .*is it a TLS listener"):
            conn.connect()
    finally:
        plain.close()
    with tls_cluster(server_context(certs)) as fake:  # a plaintext client, a TLS listener
        conn = connection(fake.port(0), None, connect_timeout_ms=3_000)
        started = time.monotonic()
        with pytest.raises(NetworkError, match=r"version handshake failed: .*if the listener "
                                               "speaks TLS, use security_protocol='SSL'"):
            conn.connect()
        assert time.monotonic() - started < 2.5
    assert fake.handshake_errors


# ---------------------------------------------------------------- the clients
def _consume(consumer: Consumer, count: int, timeout_s: float = 30) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(r for rs in consumer.poll(200).values() for r in rs)
    return got


def test_producer_consumer_admin_over_ssl(certs: Certs) -> None:
    tls: dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
    with tls_cluster(server_context(certs), num_brokers=2) as fake:
        with Admin(fake.bootstrap, request_timeout_ms=10_000, **tls) as admin:
            assert admin.create_topics([NewTopic("t", 2, 1)]) == {"t": None}
            assert admin.list_topics() == ["t"]
        values = [b"%06d" % i * (1 + i % 3) for i in range(300)]
        values += [bytes([i]) * 300_000 for i in range(4)]  # requests above 256 KiB
        with Producer(fake.bootstrap, linger_ms=5, max_request_size=2_000_000,
                      **tls) as producer:
            futures = [producer.send("t", v, key=b"%d" % (i % 7)) for i, v in enumerate(values)]
            assert all(f.result(30).offset >= 0 for f in futures)
        with Consumer(fake.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                      **tls) as consumer:
            consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
            got = _consume(consumer, len(values))
        assert sorted(r.value for r in got) == sorted(values)
        with Consumer(fake.bootstrap, group_id="g", auto_offset_reset="earliest",
                      session_timeout_ms=3000, heartbeat_interval_ms=100,
                      fetch_max_wait_ms=100, **tls) as member:
            member.subscribe(["t"])  # coordinator and heartbeat connections use TLS too
            assert len(_consume(member, len(values))) == len(values)
            member.commit()
            deadline = time.monotonic() + 10  # the heartbeat thread's first beat, over TLS
            while fake.heartbeats == 0 and time.monotonic() < deadline:
                member.poll(timeout_ms=100)
        assert fake.heartbeats > 0 and fake.group("g").offsets
    assert fake.handshake_errors == []


def test_sasl_ssl_logs_in_inside_tls(certs: Certs) -> None:
    login: dict[str, Any] = {
        "security_protocol": "SASL_SSL", "ssl_cafile": str(certs.ca),
        "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD}
    with tls_cluster(server_context(certs)) as fake:
        fake.create_topic("secure")
        with Producer(fake.bootstrap, linger_ms=0, **login) as producer:
            producer.send("secure", b"inside tls").result(30)
        with Consumer(fake.bootstrap, auto_offset_reset="earliest", **login) as consumer:
            consumer.assign([TopicPartition("secure", 0)])
            assert [r.value for r in _consume(consumer, 1)] == [b"inside tls"]
        with fake.cond:
            logins, accepted = list(fake.logins), fake.connections_accepted
        assert logins == [USER] * accepted  # every connection logged in
        wrong = {**login, "sasl_plain_password": "wrong"}
        with (Admin(fake.bootstrap, **wrong) as admin,
              pytest.raises(AuthenticationError, match="login as 'alice' refused")):
            admin.list_topics()
    assert fake.handshake_errors == []
