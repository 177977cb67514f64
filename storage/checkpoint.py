"""Checkpoint files: small text files that record per-partition positions durably.

Two kinds, both versioned text (UTF-8, ``\\n`` line ends, one space between fields)::

    line   offset checkpoint              leader-epoch checkpoint
    1      "0"  (format version)          "0"  (format version)
    2      N    (entry count, decimal)    N    (entry count, decimal)
    3..N+2 "<topic> <partition> <offset>" "<epoch> <start_offset>"

Offset checkpoints live in the data directory, one file per kind of position:
``recovery-point-offset-checkpoint`` (everything below is fsync'd),
``replication-offset-checkpoint`` (high watermarks), ``log-start-offset-checkpoint`` and
``recovery-cut-checkpoint`` (replicas whose log recovery cut, with their log end then).
The leader-epoch checkpoint lives in each partition directory as
``leader-epoch-checkpoint``: the epoch -> first offset map of the LeaderEpochCache.

Topic names follow Kafka's rules (``[a-zA-Z0-9._-]``, 1-249 characters), so they never
contain a space and the format needs no quoting; a bad name is refused on write.

Writes are atomic (:func:`storage.file_io.atomic_write_text`): the new content goes to
``<path>.tmp``, is flushed and fsync'd, then ``os.replace`` puts it over ``<path>`` and the
directory is fsync'd so the rename itself survives a crash.  A crash at any point leaves
either the old or the new file, never a mix; a stray ``.tmp`` left by a crash is ignored
by readers and overwritten by the next write.

Reads are strict: a missing file is empty (first start), anything malformed - unknown
version, count that does not match the lines, a non-integer or negative field, a
duplicate key, epochs out of order - raises :class:`CorruptCheckpointError` whose message
is ``<path>:<line>: <reason>``.

Costs: O(N) time and bytes for N entries per read or write, plus two fsyncs per write.
Thread/process safety: none.  One owner (the LogManager, or the partition for its
leader-epoch file) writes a given file; two concurrent writers of the same path would
share the temp file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition, topic_name_error
from storage.file_io import atomic_write_bytes, atomic_write_text

VERSION = 0
INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_CUT_CHECKPOINT = "recovery-cut-checkpoint"


_E = TypeVar("_E")


class CorruptCheckpointError(MiniKafkaError):
    """A checkpoint file cannot be parsed; ``str()`` names the file and the line."""

    code = ErrorCode.KAFKA_STORAGE_ERROR

    def __init__(self, path: str | Path, line: int, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        super().__init__(f"{self.path}:{line}: {reason}")


def _parse_int(path: Path, line_no: int, field: str, what: str, limit: int) -> int:
    # int() accepts "+1", " 1", "1_000": demand plain decimal digits.
    if not field.isascii() or not field.isdigit():
        reason = f"{what} {field!r} is not a non-negative integer"
        raise CorruptCheckpointError(path, line_no, reason)
    value = int(field)
    if value > limit:
        raise CorruptCheckpointError(path, line_no, f"{what} {value} exceeds {limit}")
    return value


def _read_entries(
    path: Path, fields_per_line: int, parse: Callable[[int, list[str]], _E]
) -> list[_E]:
    """Parse a versioned checkpoint; ``parse(line_no, fields)`` builds one entry."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = raw[: exc.start].count(b"\n") + 1
        raise CorruptCheckpointError(path, line_no, "not valid UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line, it does not start a new one
    if not lines:
        raise CorruptCheckpointError(path, 1, "file is empty (no version line)")
    if lines[0] != str(VERSION):
        raise CorruptCheckpointError(path, 1, f"unsupported version {lines[0]!r}, expected '0'")
    if len(lines) < 2:
        raise CorruptCheckpointError(path, 2, "missing entry count line")
    count = _parse_int(path, 2, lines[1], "entry count", INT32_MAX)
    body = lines[2:]
    if len(body) != count:
        line_no = 2 + min(len(body), count) + 1
        raise CorruptCheckpointError(
            path, line_no, f"count line says {count} entries but the file has {len(body)}"
        )
    entries: list[_E] = []
    for index, line in enumerate(body):
        line_no = index + 3
        fields = line.split(" ")
        if len(fields) != fields_per_line:
            raise CorruptCheckpointError(
                path,
                line_no,
                f"expected {fields_per_line} space-separated fields, got {line!r}",
            )
        entries.append(parse(line_no, fields))
    return entries


class OffsetCheckpointFile:
    """``(topic, partition) -> offset`` map in the versioned text format above."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Atomically replace the file with ``offsets`` (sorted by topic, partition).

        Raises ``ValueError`` for an illegal topic name, a negative partition or offset.
        """
        lines = [str(VERSION), str(len(offsets))]
        for (topic, partition), offset in sorted(offsets.items()):
            reason = topic_name_error(topic)
            if reason is not None:
                raise ValueError(f"{self.path}: {reason}")
            _check_int(f"{self.path}: partition of {topic}", partition, INT32_MAX)
            _check_int(f"{self.path}: offset of {topic}-{partition}", offset, INT64_MAX)
            lines.append(f"{topic} {partition} {offset}")
        atomic_write_text(self.path, "\n".join(lines) + "\n")

    def read(self) -> dict[TopicPartition, int]:
        """The stored map; ``{}`` when the file does not exist."""
        result: dict[TopicPartition, int] = {}

        def parse(line_no: int, fields: list[str]) -> tuple[TopicPartition, int]:
            topic, partition_s, offset_s = fields
            reason = topic_name_error(topic)
            if reason is not None:
                raise CorruptCheckpointError(self.path, line_no, reason)
            partition = _parse_int(self.path, line_no, partition_s, "partition", INT32_MAX)
            offset = _parse_int(self.path, line_no, offset_s, "offset", INT64_MAX)
            key = TopicPartition(topic, partition)
            if key in result:
                raise CorruptCheckpointError(
                    self.path, line_no, f"duplicate entry for {topic}-{partition}"
                )
            result[key] = offset
            return key, offset

        _read_entries(self.path, 3, parse)
        return result


class LeaderEpochCheckpointFile:
    """``[(epoch, start_offset), ...]`` with epochs strictly increasing and start offsets
    non-decreasing (the shape of a LeaderEpochCache), in the versioned text format above."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def write(self, entries: Sequence[tuple[int, int]], *, durable: bool = True) -> None:
        """Atomically replace the file; ``ValueError`` if entries are negative or unordered.
        ``durable=False``: without fsyncs (after a power cut the file may be the previous
        version, or missing or damaged: see :func:`storage.file_io.atomic_write_bytes`)."""
        lines = [str(VERSION), str(len(entries))]
        for index, (epoch, start_offset) in enumerate(entries):
            _check_int(f"{self.path}: epoch", epoch, INT32_MAX)
            _check_int(f"{self.path}: start offset of epoch {epoch}", start_offset, INT64_MAX)
            if index:
                reason = _order_error(entries[index - 1], (epoch, start_offset))
                if reason is not None:
                    raise ValueError(f"{self.path}: {reason}")
            lines.append(f"{epoch} {start_offset}")
        atomic_write_bytes(self.path, ("\n".join(lines) + "\n").encode(), durable=durable)

    def read(self) -> list[tuple[int, int]]:
        """The stored entries in order; ``[]`` when the file does not exist."""
        result: list[tuple[int, int]] = []

        def parse(line_no: int, fields: list[str]) -> tuple[int, int]:
            entry = (
                _parse_int(self.path, line_no, fields[0], "epoch", INT32_MAX),
                _parse_int(self.path, line_no, fields[1], "start offset", INT64_MAX),
            )
            if result:
                reason = _order_error(result[-1], entry)
                if reason is not None:
                    raise CorruptCheckpointError(self.path, line_no, reason)
            result.append(entry)
            return entry

        _read_entries(self.path, 2, parse)
        return result


def _order_error(previous: tuple[int, int], entry: tuple[int, int]) -> str | None:
    if entry[0] == previous[0]:
        return f"duplicate entry for epoch {entry[0]}"
    if entry[0] < previous[0]:
        return f"epoch {entry[0]} follows epoch {previous[0]} (epochs must increase)"
    if entry[1] < previous[1]:
        return (
            f"epoch {entry[0]} starts at {entry[1]}, before epoch {previous[0]} "
            f"(start offset {previous[1]})"
        )
    return None


def _check_int(what: str, value: object, limit: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        raise ValueError(f"{what} must be an integer in [0, {limit}], got {value!r}")

