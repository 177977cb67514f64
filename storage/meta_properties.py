"""A data directory's identity: ``meta.properties`` names the cluster and node it belongs to.

Kafka writes the same file when a log directory is formatted (``kafka-storage format``)
and refuses to start a node whose directory belongs to another cluster.  Ours::

    <data_dir>/meta.properties
        # written by minikafka; do not edit
        version=1
        cluster.id=<the cluster's id>
        node.id=<broker id>          (absent in a controller's directory)

:func:`check_data_dir_identity` runs before a broker or controller opens anything in its
directory.  A directory without the file (new, or written by a version that had none)
gets one naming the configured cluster and node.  A directory whose file names another
cluster raises :class:`InconsistentClusterIdError`, and one naming another node raises
:class:`DataDirIdentityError`: starting would mix two clusters' logs (a follower would
truncate to, or fetch from, a log that is not its partition's) or serve another broker's
replicas under this id.  A file that cannot be parsed is refused too, never rewritten:
the operator decides (the message names the file).

Costs: one small read at start-up, one fsynced write (temp file, rename, directory
fsync) the first time.  Thread-safety: start-up only, one caller per directory (the
data-directory lock of :mod:`storage.lock` keeps a second process out).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clients.protocol.errors import ErrorCode, MiniKafkaError
from storage.file_io import atomic_write_text, read_small_file

__all__ = [
    "META_PROPERTIES",
    "DataDirIdentityError",
    "InconsistentClusterIdError",
    "check_data_dir_identity",
    "read_meta_properties",
]

META_PROPERTIES = "meta.properties"
_VERSION = "1"
_MAX_BYTES = 4096  # the file is a few lines; anything larger is not ours


class DataDirIdentityError(MiniKafkaError):
    """The data directory belongs to another node, or its identity file is unreadable."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class InconsistentClusterIdError(DataDirIdentityError):
    """The data directory belongs to another cluster."""

    code = ErrorCode.INCONSISTENT_CLUSTER_ID


def read_meta_properties(data_dir: str | Path) -> dict[str, str] | None:
    """The file's ``key=value`` pairs; None when there is no file.  Raises
    :class:`DataDirIdentityError` for a file that is not a small properties file."""

    def check(pairs: dict[str, str]) -> None:
        if pairs.get("version") != _VERSION or not pairs.get("cluster.id"):
            raise ValueError(f"expected version={_VERSION} and a cluster.id")

    return read_identity_file(Path(data_dir) / META_PROPERTIES, check)


def read_identity_file(path: Path, check: Callable[[dict[str, str]], None],
                       max_bytes: int = _MAX_BYTES) -> dict[str, str] | None:
    """A small ``key=value`` identity file's pairs (``#`` comments and blank lines
    skipped); None when there is none.  ``check`` raises ValueError for pairs that are not
    what the file must hold.  Raises :class:`DataDirIdentityError` for an unreadable,
    oversized, undecodable, malformed or refused file (never rewritten here)."""
    try:
        raw = read_small_file(path, max_bytes)
    except OSError as exc:
        raise DataDirIdentityError(f"cannot read {path}: {exc}") from None
    if raw is None:
        return None
    try:
        if len(raw) > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        pairs: dict[str, str] = {}
        for number, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"line {number} is not key=value")
            pairs[key.strip()] = value.strip()
        check(pairs)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataDirIdentityError(
            f"{path} is damaged ({exc}); restore it or move the directory away") from None
    return pairs


def check_data_dir_identity(data_dir: str | Path, cluster_id: str,
                            node_id: int | None = None) -> None:
    """Refuse a directory of another cluster or node; label an unlabelled one (see the
    module docstring).  ``node_id`` None: a controller's directory (no node id)."""
    if not cluster_id:
        raise DataDirIdentityError("the cluster id must not be empty")
    directory = Path(data_dir)
    found = read_meta_properties(directory)
    path = directory / META_PROPERTIES
    if found is None:
        directory.mkdir(parents=True, exist_ok=True)
        lines = ["# written by minikafka; do not edit", f"version={_VERSION}",
                 f"cluster.id={cluster_id}"]
        if node_id is not None:
            lines.append(f"node.id={node_id}")
        atomic_write_text(path, "\n".join(lines) + "\n")
        return
    if found["cluster.id"] != cluster_id:
        raise InconsistentClusterIdError(
            f"{directory} belongs to cluster {found['cluster.id']!r}, not {cluster_id!r} "
            f"(see {path}); use this cluster's own data directory")
    expected = None if node_id is None else str(node_id)
    if found.get("node.id") != expected:
        whose = f"node {found['node.id']}" if "node.id" in found else "a controller"
        me = f"node {node_id}" if node_id is not None else "a controller"
        raise DataDirIdentityError(
            f"{directory} belongs to {whose} of cluster {cluster_id!r}, not {me} "
            f"(see {path})")
