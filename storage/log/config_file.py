"""``log.config``: the :class:`LogConfig` a log was last given, kept beside its segments.

Log recovery rebuilds indexes with the log's config (``index_interval_bytes``: one
offset-index entry per interval of bytes; ``segment_index_bytes``: the index's size, so
its entry bound).  A broker in a cluster opens and recovers its logs before it has a
metadata image (the recovery cuts are part of its registration,
:mod:`broker.replica.recovery_marks`), so it does not know its topics' configs then:
without this file an unclean restart rebuilt every rescanned segment's offset index with
the broker's default interval, not the one its bytes were written under (the flake of
``tests/broker/test_topic_configs_cluster.py``: 3 entries where the topic's 8192 gives 2).
Kafka loads its logs after the metadata image instead; here the registration needs them
loaded first, so the config goes to disk with the log.

Format: one JSON object, :meth:`LogConfig.to_dict` (field names, plain values)::

    <data_dir>/<topic>-<partition>/log.config
        {"segment_bytes": 100000, "index_interval_bytes": 8192, ...}

Contract: :func:`write_log_config` replaces the file (temp file, rename) without an
fsync: a killed process loses nothing of it (the page cache outlives it), and after a
power cut the file may be missing, empty, torn or the one before, which the reader
refuses or takes as it is (only index density depends on it).  A config change reaches
every partition of its topic at once on the broker's event loop, so two fsyncs per
partition there would stall it.  :class:`~storage.log.log.Log` calls it when it is created
and when its config changes (:meth:`~storage.log.log.Log.update_config`).
:func:`read_log_config` returns the stored config, or None when there is none or it
cannot be used (unreadable, not JSON, a key or value :meth:`LogConfig.from_dict`
refuses: logged); the caller then opens with the config it has.  The file is advisory:
it decides how densely rebuilt indexes are, never which bytes a log keeps.  Log recovery
leaves it alone (not a segment or an index).

Costs: one small read per log open that asks for it; one small write and a rename, no
fsync, at a log's creation and at each config change.  Thread-safety: one thread per log
directory, as for the log itself.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from clients.protocol.errors import InvalidConfigError
from storage.config import LogConfig
from storage.file_io import atomic_write_bytes, read_small_file

__all__ = ["LOG_CONFIG_FILE", "read_log_config", "write_log_config"]

log = logging.getLogger(__name__)

LOG_CONFIG_FILE = "log.config"
_MAX_BYTES = 4096  # a LogConfig's JSON is ~600 bytes


def read_log_config(log_dir: Path) -> LogConfig | None:
    """The config stored in ``log_dir``; None when there is none or it is damaged."""
    path = log_dir / LOG_CONFIG_FILE
    try:
        raw = read_small_file(path, _MAX_BYTES)
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    if raw is None:
        return None
    try:
        if len(raw) > _MAX_BYTES:
            raise ValueError(f"larger than {_MAX_BYTES} bytes")
        stored = json.loads(raw.decode("utf-8"))
        if not isinstance(stored, dict):
            raise ValueError("not a JSON object")
        return LogConfig.from_dict(stored)
    except (UnicodeDecodeError, ValueError, InvalidConfigError) as exc:
        log.warning("%s is damaged (%s); opening with the config given", path, exc)
        return None


def write_log_config(log_dir: Path, config: LogConfig) -> None:
    """Store ``config`` in ``log_dir`` (temp file, rename; not fsync'd: see above)."""
    atomic_write_bytes(log_dir / LOG_CONFIG_FILE,
                       json.dumps(config.to_dict(), sort_keys=True).encode() + b"\n",
                       durable=False)
