"""Local snapshots of a quorum voter (KIP-630, docs/quorum.md): the snapshot files
(``QuorumSnapshots``: names, retention, every refusal with the previous one used), and
three real ControllerServers in one event loop writing snapshots of their committed
image every few records, then all restarted: each loads its newest snapshot (a damaged
newest one is refused, the older one used), replays only the log after it, and the
quorum serves the same metadata again.  About two seconds.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from broker.async_client import AsyncConnection
from broker.controller.config import ControllerConfig
from broker.controller.quorum.snapshots import QuorumSnapshots, snapshot_file_name
from broker.controller.quorum.voter_directory import format_new_quorum
from broker.controller.server import ControllerServer
from broker.metadata.image import MetadataImage
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from replication.raft.messages import OffsetAndEpoch
from tests.broker.controller.processes import FEATURES, incarnation
from tests.broker.controller.quorum.test_controller_quorum import (
    IDS,
    QUORUM,
    _create_topic,
    _free_ports,
    _until,
)


def _image(end_offset: int) -> MetadataImage:
    image = MetadataImage()
    image.advance_to(end_offset - 1)
    return image


def test_snapshot_files_are_named_by_end_offset_and_epoch_and_two_kept(tmp_path: Path) -> None:
    store = QuorumSnapshots(tmp_path)
    assert store.write(_image(5), 1) == OffsetAndEpoch(5, 1)
    store.write(_image(9), 2)
    store.write(_image(12), 2)
    assert [p.name for _i, p in store.list()] == [
        "00000000000000000009-0000000002.checkpoint",
        "00000000000000000012-0000000002.checkpoint"]
    loaded = store.load_latest(0, 20, lambda _o: 2)
    assert loaded is not None and loaded[0] == OffsetAndEpoch(12, 2)
    assert loaded[1].last_applied_offset == 11
    with pytest.raises(ValueError):
        store.write(MetadataImage(), 1)  # nothing applied: nothing to snapshot


@pytest.mark.parametrize("damage, reason", [
    ("flip", "fails its CRC"),
    ("epoch", "the log's entry at offset 7 has epoch 3"),
    ("misnamed", "its image ends at offset 7"),
])
def test_a_refused_snapshot_falls_back_to_the_previous_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str, reason: str) -> None:
    store = QuorumSnapshots(tmp_path)
    store.write(_image(4), 2)
    newest = store.directory / snapshot_file_name(store.write(_image(8), 2))
    epochs = dict.fromkeys(range(10), 2)
    if damage == "flip":
        data = bytearray(newest.read_bytes())
        data[-1] ^= 0xFF
        newest.write_bytes(bytes(data))
    elif damage == "epoch":
        epochs[7] = 3
    else:
        newest.rename(tmp_path / snapshot_file_name(OffsetAndEpoch(9, 2)))
    with caplog.at_level(logging.WARNING):
        loaded = store.load_latest(0, 10, lambda o: epochs.get(o, -1))
    assert loaded is not None and loaded[0] == OffsetAndEpoch(4, 2)
    assert loaded[1].last_applied_offset == 3
    assert reason in caplog.text and "refused" in caplog.text


def test_a_snapshot_past_the_log_end_is_used_and_one_below_the_start_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = QuorumSnapshots(tmp_path)
    store.write(_image(4), 2)
    store.write(_image(8), 3)
    loaded = store.load_latest(0, 5, lambda _o: 2)  # installed, the log not yet reset
    assert loaded is not None and loaded[0] == OffsetAndEpoch(8, 3)
    with caplog.at_level(logging.WARNING):
        assert store.load_latest(9, 12, lambda _o: 3) is None
    assert "ends below the log start 9" in caplog.text


def test_install_keeps_only_a_valid_snapshot_and_serves_it_in_chunks(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = QuorumSnapshots(tmp_path)
    data = _image(6).encode_snapshot()
    with caplog.at_level(logging.WARNING):
        assert not store.install(OffsetAndEpoch(6, 1), data[:-1] + bytes([data[-1] ^ 1]))
        assert not store.install(OffsetAndEpoch(7, 1), data)  # its image ends at 5
    assert store.list() == [] and "refused" in caplog.text
    assert store.install(OffsetAndEpoch(6, 1), data)
    assert store.size(OffsetAndEpoch(6, 1)) == len(data)
    assert store.read(OffsetAndEpoch(6, 1), 3, 5) == data[3:8]
    assert store.read(OffsetAndEpoch(6, 2), 0, 5) is None
    assert store.size(OffsetAndEpoch(6, 2)) is None


def test_voters_snapshot_and_restart_from_their_newest_snapshot(tmp_path: Path) -> None:
    ports = dict(zip(IDS, _free_ports(3), strict=True))
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    assert format_new_quorum([tmp_path / str(i) for i in IDS])  # as cluster start does

    def server(i: int) -> ControllerServer:
        return ControllerServer(ControllerConfig.load(None, {
            "node_id": i, "controller_quorum_voters": voters, "port": ports[i],
            "data_dir": str(tmp_path / str(i)), "metadata_snapshot_interval_records": 3,
            **QUORUM}))

    async def run(names: list[str], register: bool) -> None:
        servers = {i: server(i) for i in IDS}
        tasks = {i: asyncio.create_task(s.serve()) for i, s in servers.items()}
        try:
            await _until(lambda: any(s.quorum and s.quorum.active for s in servers.values()),
                         "an active controller")
            leader = next(i for i, s in servers.items() if s.quorum and s.quorum.active)
            conn = AsyncConnection("127.0.0.1", ports[leader], client_id="test")
            try:
                if register:  # a broker to place replicas on (unfenced across the restart)
                    registered = await conn.request(ApiKey.BROKER_REGISTRATION, {
                        "broker_id": 0, "cluster_id": "minikafka",
                        "incarnation_id": incarnation("b0"), "listeners": [{
                            "name": "PLAINTEXT", "host": "127.0.0.1", "port": 9,
                            "security_protocol": 0}], "features": FEATURES})
                    assert registered["error_code"] == 0
                    epoch = registered["broker_epoch"]
                    beat = await conn.request(ApiKey.BROKER_HEARTBEAT, {
                        "broker_id": 0, "broker_epoch": epoch, "current_metadata_offset": epoch,
                        "want_fence": False, "want_shut_down": False})
                    assert (beat["error_code"], beat["is_fenced"]) == (0, False)
                for name in names:
                    created = await conn.request(ApiKey.CREATE_TOPICS, _create_topic(name))
                    assert created["topics"][0]["error_code"] == ErrorCode.NONE
            finally:
                conn.close()
            every = {"a", "b", "c", "d", "e", "f", *names}
            await _until(lambda: all(
                s.quorum is not None and every <= set(s.quorum.image.topics)
                and s.quorum.image.last_applied_offset + 1 == s.quorum.high_watermark
                for s in servers.values()), "every voter applied every topic")
        finally:
            for s in servers.values():
                s.stop()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    asyncio.run(run(["a", "b", "c", "d", "e", "f"], register=True))
    for i in IDS:
        found = QuorumSnapshots(tmp_path / str(i) / "__cluster_metadata-0").list()
        assert len(found) == 2, (i, found)  # every 3 records, the newest two kept
    # damage voter 1's newest snapshot: it must load the previous one
    first = tmp_path / str(IDS[0]) / "__cluster_metadata-0"
    older, newest = QuorumSnapshots(first).list()
    data = bytearray(newest[1].read_bytes())
    data[40] ^= 0xFF
    newest[1].write_bytes(bytes(data))

    async def restarted() -> None:
        servers = {i: server(i) for i in IDS}
        for s in servers.values():
            s.quorum.open()  # type: ignore[union-attr]
        try:
            got = {i: s.quorum.snapshot_loaded for i, s in servers.items()}  # type: ignore
            assert got[IDS[0]] == older[0]
            for i in IDS[1:]:
                snapshot = got[i]
                assert snapshot is not None and snapshot.end_offset >= older[0].end_offset
                image = servers[i].quorum.image  # type: ignore[union-attr]
                # the image is the snapshot's: nothing of the log replayed yet
                assert image.last_applied_offset + 1 == snapshot.end_offset
                assert {"a", "b"} <= set(image.topics)
        finally:
            for s in servers.values():
                s.quorum.close()  # type: ignore[union-attr]

    asyncio.run(restarted())
    # all three restarted together: the quorum serves the same metadata, and more
    asyncio.run(run(["g"], register=False))


def test_a_voter_behind_the_log_start_catches_up_by_fetch_snapshot(tmp_path: Path) -> None:
    """``quorum_cut_log_at_snapshot``: one voter stopped while the others snapshot every 3
    records and cut their logs; restarted, it is below the leader's log start, fetches
    the snapshot (FetchSnapshot over the real wire), installs it, continues after it,
    and every voter ends with the same committed image, byte for byte."""
    ports = dict(zip(IDS, _free_ports(3), strict=True))
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    assert format_new_quorum([tmp_path / str(i) for i in IDS])  # as cluster start does

    def server(i: int) -> ControllerServer:
        return ControllerServer(ControllerConfig.load(None, {
            "node_id": i, "controller_quorum_voters": voters, "port": ports[i],
            "data_dir": str(tmp_path / str(i)), "metadata_snapshot_interval_records": 3,
            "quorum_cut_log_at_snapshot": True, **QUORUM}))

    async def scenario() -> None:
        servers = {i: server(i) for i in IDS}
        tasks = {i: asyncio.create_task(s.serve()) for i, s in servers.items()}
        conn: AsyncConnection | None = None
        try:
            def active() -> list[int]:
                return [i for i, s in servers.items() if s.quorum and s.quorum.active]

            await _until(lambda: len(active()) == 1, "an active controller")
            leader = active()[0]
            conn = AsyncConnection("127.0.0.1", ports[leader], client_id="test")
            registered = await conn.request(ApiKey.BROKER_REGISTRATION, {
                "broker_id": 0, "cluster_id": "minikafka", "incarnation_id": incarnation("b0"),
                "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9,
                               "security_protocol": 0}], "features": FEATURES})
            epoch = registered["broker_epoch"]
            beat = await conn.request(ApiKey.BROKER_HEARTBEAT, {
                "broker_id": 0, "broker_epoch": epoch, "current_metadata_offset": epoch,
                "want_fence": False, "want_shut_down": False})
            assert (beat["error_code"], beat["is_fenced"]) == (0, False)
            created = await conn.request(ApiKey.CREATE_TOPICS, _create_topic("a"))
            assert created["topics"][0]["error_code"] == ErrorCode.NONE

            lagging = next(i for i in IDS if i != leader)
            lagging_quorum = servers[lagging].quorum
            assert lagging_quorum is not None
            await _until(lambda: "a" in lagging_quorum.image.topics, "the voter has 'a'")
            lagging_end = lagging_quorum.replica.log.end_offset
            servers[lagging].stop()
            await tasks.pop(lagging)
            for name in ("b", "c", "d", "e"):
                created = await conn.request(ApiKey.CREATE_TOPICS, _create_topic(name))
                assert created["topics"][0]["error_code"] == ErrorCode.NONE
            leader_quorum = servers[leader].quorum
            assert leader_quorum is not None
            await _until(lambda: leader_quorum.log_start_offset > lagging_end,
                         "the leader's log cut past the stopped voter's end")
            cut_at = leader_quorum.log_start_offset

            servers[lagging] = server(lagging)
            tasks[lagging] = asyncio.create_task(servers[lagging].serve())
            back = servers[lagging].quorum
            assert back is not None
            await _until(lambda: servers[lagging].apis is not None, "restarted")
            await _until(lambda: {"a", "b", "c", "d", "e"} <= set(back.image.topics),
                         "the restarted voter has every topic")
            assert back.log_start_offset >= cut_at  # its log restarted at a snapshot
            assert back.snapshots.latest_id() is not None
            created = await conn.request(ApiKey.CREATE_TOPICS, _create_topic("f"))
            assert created["topics"][0]["error_code"] == ErrorCode.NONE

            def same() -> bool:
                quorums = [s.quorum for s in servers.values()]
                hws = {q.high_watermark for q in quorums if q is not None}
                return len(hws) == 1 and all(
                    q is not None and q.image.last_applied_offset + 1 == q.high_watermark
                    and "f" in q.image.topics for q in quorums)

            await _until(same, "every voter at the same committed offset")
            images = {i: s.quorum.image.encode_snapshot()  # type: ignore[union-attr]
                      for i, s in servers.items()}
            assert len(set(images.values())) == 1
        finally:
            if conn is not None:
                conn.close()
            for s in servers.values():
                s.stop()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    asyncio.run(scenario())
