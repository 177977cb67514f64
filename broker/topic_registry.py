"""Topic metadata of a standalone broker (no controller): names, partition counts, configs.

Stored as ``<data_dir>/topics.json``::

    {"version": 1,
     "topics": {"<name>": {"num_partitions": 3, "replication_factor": 1,
                           "configs": {"retention_ms": "60000"}}}}

written to a temp file, fsync'd and renamed (with the directory fsync'd), so a crash
leaves either the old or the new file.  Used only without a controller
(``controller_address`` empty): in controller mode the controller owns topic metadata
and the broker reads it from its :class:`~broker.metadata.image.MetadataImage`, whose
:class:`~broker.metadata.image.TopicInfo` also carries the topic id and each
partition's registration; a :class:`StandaloneTopic` has neither (this broker leads
every partition).

Topic configs are the per-topic overrides of the broker's log defaults, validated by
:meth:`storage.config.LogConfig.from_dict` when the topic is created.  Costs: every
change rewrites the file (O(topics)); lookups are dict reads.  Not thread-safe: owned by
the broker's event loop.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from clients.protocol.errors import ErrorCode, MiniKafkaError

FILE_NAME = "topics.json"
MAX_PARTITIONS_PER_TOPIC = 10_000


class CorruptTopicRegistryError(MiniKafkaError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


@dataclass
class StandaloneTopic:
    """One topic of a standalone broker, as ``topics.json`` stores it."""

    name: str
    num_partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)


class TopicRegistry:
    """The standalone broker's topics, loaded from and saved to ``topics.json``."""

    def __init__(self, data_dir: str | Path) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self.topics: dict[str, StandaloneTopic] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            topics = raw["topics"]
            if raw.get("version") != 1 or not isinstance(topics, dict):
                raise ValueError("unsupported version or shape")
            loaded = {}
            for name, info in topics.items():
                loaded[name] = StandaloneTopic(
                    name=name,
                    num_partitions=int(info["num_partitions"]),
                    replication_factor=int(info.get("replication_factor", 1)),
                    configs={str(k): str(v) for k, v in info.get("configs", {}).items()},
                )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptTopicRegistryError(f"{self.path}: cannot load topic metadata: {exc}") \
                from None
        self.topics = loaded

    def save(self) -> None:
        payload = {
            "version": 1,
            "topics": {
                t.name: {
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "configs": t.configs,
                }
                for t in self.topics.values()
            },
        }
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def get(self, name: str) -> StandaloneTopic | None:
        return self.topics.get(name)

    def add(self, info: StandaloneTopic) -> None:
        self.topics[info.name] = info
        self.save()

    def remove(self, name: str) -> StandaloneTopic | None:
        info = self.topics.pop(name, None)
        if info is not None:
            self.save()
        return info
