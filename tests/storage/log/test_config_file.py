"""``log.config`` (storage/log/config_file.py): the config a log was last given is stored
beside it, and a log opened by an owner that does not know its config yet
(``prefer_stored_config``) opens and recovers with it."""

from __future__ import annotations

from pathlib import Path

from clients.records.record import build_batch
from storage.config import LogConfig
from storage.log.config_file import LOG_CONFIG_FILE, read_log_config
from storage.log.log import Log

TOPIC = LogConfig(segment_bytes=100_000, index_interval_bytes=8192,
                  segment_index_bytes=40960, retention_ms=-1)


def test_created_and_changed_configs_are_stored(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", TOPIC)
    assert read_log_config(tmp_path / "t-0") == TOPIC
    changed = LogConfig(index_interval_bytes=1024)
    log.update_config(changed)
    log.close()
    assert read_log_config(tmp_path / "t-0") == changed
    reopened = Log.open(tmp_path / "t-0", LogConfig(), prefer_stored_config=True)
    assert reopened.config == changed and reopened.active.config == changed
    reopened.close()
    # without the flag the owner's config is the log's (a standalone broker's registry)
    given = Log.open(tmp_path / "t-0", LogConfig())
    assert given.config == LogConfig()
    given.close()


def test_an_unclean_open_rebuilds_the_index_with_the_stored_interval(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", TOPIC)
    for size in (4000, 4000, 23000, 4000, 4000):
        log.append_as_leader(build_batch([(b"k", b"v" * size, 1000, ())]), 0)
    entries = log.active.index.entries
    log.close()
    assert entries == 2  # 8192 gives 2; the default 4096 gives 3
    reopened = Log.open(tmp_path / "t-0", LogConfig(), had_clean_shutdown=False,
                        prefer_stored_config=True)
    assert reopened.recovery_report.segments_rescanned == 1
    assert reopened.active.index.entries == entries
    reopened.close()


def test_a_damaged_or_foreign_file_is_ignored(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    Log.open(directory, TOPIC).close()
    for content in (b"", b"{", b"[1]", b'{"no_such_key": 1}', b'{"segment_bytes": -5}',
                    b"\xff\xfe", b"{}" + b" " * 5000):
        (directory / LOG_CONFIG_FILE).write_bytes(content)
        assert read_log_config(directory) is None
        opened = Log.open(directory, LogConfig(), prefer_stored_config=True)
        assert opened.config == LogConfig()
        opened.close()
    (directory / LOG_CONFIG_FILE).unlink()
    assert read_log_config(directory) is None
