"""A Fetch's topics by id (KIP-516, Fetch v13+): which topic an entry's ``topic_id`` names.

Contract (Kafka's): an id is resolved through the broker's metadata image on every read
(``MetadataImage.topic_names_by_id``), never remembered, so a session keyed by id
(:mod:`broker.fetch_sessions.context`) follows deletions and re-creations:

| the id                                                   | answer (every partition)  |
|----------------------------------------------------------|---------------------------|
| unknown to the image (deleted; a standalone broker, whose | UNKNOWN_TOPIC_ID          |
| topics have no ids; the zero UUID)                        |                           |
| known, but the log hosted under its name is another       | INCONSISTENT_TOPIC_ID     |
| topic's (the image moved on, the replicas not yet)        |                           |
| known and hosted (or not hosted here: the partition's own | read by name              |
| error follows, e.g. NOT_LEADER_OR_FOLLOWER)               |                           |

A follower fetching a deleted topic by its id thus never copies the data of a re-created
namesake.  Fetch v4-12 names topics: the name is taken as it is.

Costs: two dict lookups per topic entry.  Thread-safety: the broker's event loop (the
image and the hosted ids are its state).
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.metadata.image import MetadataImage
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import FetchRequestTopic
from clients.protocol.topics import ZERO_UUID


def topic_name(image: MetadataImage | None, hosted_topic_uuids: Mapping[str, bytes],
               topic: FetchRequestTopic, by_id: bool) -> tuple[str, int]:
    """``(name, error code)`` of a Fetch topic entry (see the module docstring); the code
    is 0 when it can be read by that name, the name "" when the id is unknown."""
    if not by_id:
        return topic["name"], 0
    topic_id = topic["topic_id"]
    name = None if image is None or topic_id == ZERO_UUID else (
        image.topic_names_by_id.get(topic_id))
    if name is None:
        return "", int(ErrorCode.UNKNOWN_TOPIC_ID)
    if hosted_topic_uuids.get(name, topic_id) != topic_id:
        return name, int(ErrorCode.INCONSISTENT_TOPIC_ID)
    return name, 0
