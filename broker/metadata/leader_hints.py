"""Leader hints from the metadata image (KIP-951): what a Produce or Fetch answer tells a
client whose partition moved, so it need not ask Metadata first.

``current_leader``: the partition's leader id and epoch (a partition error's tagged
``current_leader``, on NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH); ``leader_endpoints``:
the endpoints of the leaders so named (the response's ``node_endpoints``: Produce v10+,
Fetch v16+).  Without an image (a standalone broker) there is no hint.

Costs: one dict lookup per partition / leader.  Thread-safety: the broker's event loop
(the image is its state).
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.metadata.image import MetadataImage
from clients.protocol.message_types import LeaderIdAndEpoch, NodeEndpoint


def current_leader(image: MetadataImage | None, topic: str, index: int
                   ) -> LeaderIdAndEpoch | None:
    """The partition's leader and epoch from the image; None when unknown."""
    state = None if image is None else image.partition(topic, index)
    if state is None:
        return None
    return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}


def leader_endpoints(image: MetadataImage | None, leaders: Iterable[int]) -> list[NodeEndpoint]:
    """The endpoints of ``leaders`` (ids of brokers the image knows), by id."""
    if image is None:
        return []
    return [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
            for n in sorted(set(leaders)) if (b := image.brokers.get(n)) is not None]
