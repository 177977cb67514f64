"""The leader side of replication in the simulation: the broker's real handlers.

A follower's OffsetsForLeaderEpoch, Fetch and ListOffsets requests (built by the real
:class:`replication.follower_fetch.FollowerFetchSession`) are encoded with Kafka's codec
at our highest version, decoded as the broker decodes them, and answered by
:func:`broker.handlers.fetch.handle_offsets_for_leader_epoch`, :func:`handle_fetch` and
:func:`handle_list_offsets`; the answer goes back through the codec too (file regions
read into bytes), so a field the two sides disagree on fails here as it would on a wire.

The handlers take a :class:`BrokerCore`; :class:`SimHandlerCore` is the part of it they
use, over a simulated broker's partitions: ``partition_or_error``, ``wake_partition``
(parked acks=all produces re-check), ``check_isr_of`` / ``maybe_expand_isr`` (ISR
proposals go to the simulated controller), ``config``, ``clock``, ``image`` (None: no
``current_leader`` hints) and ``fetch_purgatory`` (followers fetch with
``max_wait_ms`` 0 here, so nothing parks).

Costs: two codec round trips per request.  Single-threaded, like the simulation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from broker.config import BrokerConfig
from broker.core import BrokerCore, TopicError
from broker.delayed import DelayedFetch
from broker.handlers.common import RegionRecords, RequestContext
from broker.handlers.fetch import (
    handle_fetch,
    handle_list_offsets,
    handle_offsets_for_leader_epoch,
)
from broker.metadata.image import MetadataImage
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    decode_request,
    decode_response,
    encode_request_bytes,
    encode_response_bytes,
)
from clients.protocol.errors import ErrorCode
from clients.protocol.registry import APIS
from clients.protocol.topics import TopicPartition
from replication.partition import Partition
from timer.clock import ManualClock
from timer.purgatory import Purgatory

if TYPE_CHECKING:
    from tests.sim.broker import SimBroker

Body = dict[str, Any]
HANDLERS = {ApiKey.OFFSETS_FOR_LEADER_EPOCH: handle_offsets_for_leader_epoch,
            ApiKey.FETCH: handle_fetch, ApiKey.LIST_OFFSETS: handle_list_offsets}


class SimHandlerCore:
    """What the fetch handlers use of a :class:`BrokerCore`, over a simulated broker."""

    def __init__(self, broker: SimBroker, clock: ManualClock, topic: str,
                 replica_lag_time_max_ms: int, fetch_max_bytes: int) -> None:
        self.broker = broker
        self.clock = clock
        self.topic = topic
        self.config = BrokerConfig(node_id=broker.id, fetch_max_bytes=fetch_max_bytes,
                                   replica_lag_time_max_ms=replica_lag_time_max_ms)
        self.image: MetadataImage | None = None
        self.fetch_purgatory: Purgatory[DelayedFetch] = Purgatory("fetch", broker.timer)

    @property
    def partitions(self) -> dict[TopicPartition, Partition]:
        return {TopicPartition(self.topic, pid): p for pid, p in self.broker.partitions.items()}

    def partition_or_error(self, topic: str, index: int) -> Partition:
        p = self.broker.partitions.get(index) if topic == self.topic else None
        if p is None:
            raise TopicError(f"unknown topic or partition {topic}-{index}",
                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return p

    def wake_partition(self, key: TopicPartition) -> None:
        self.broker.check_produces(key.partition)

    def check_isr_of(self, key: TopicPartition) -> None:
        p = self.broker.partitions.get(key.partition)
        if p is None or not p.is_leader:
            return
        self.broker.propose(p.pending_alter_partition or p.maybe_shrink_isr(
            self.clock.now_ms(), self.config.replica_lag_time_max_ms))

    def maybe_expand_isr(self, key: TopicPartition, replica_id: int) -> None:
        p = self.broker.partitions.get(key.partition)
        if p is not None:
            self.broker.propose(p.maybe_expand_isr(replica_id))


def _materialize(value: Any) -> Any:
    if isinstance(value, RegionRecords):
        return b"".join(r.read_bytes() for r in value.regions)
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_materialize(v) for v in value]
    return value


def serve(core: SimHandlerCore, api: ApiKey, body: Body) -> Body:
    """Answer one follower request with the real handler, through the codec both ways."""
    version = APIS[api].max_version
    frame = encode_request_bytes(api, version, 1, f"replica-{core.broker.id}", body)
    request = decode_request(memoryview(frame)[4:])
    answers: list[Body | None] = []
    HANDLERS[api](cast(BrokerCore, core), request.body, answers.append,
                  RequestContext(version, f"replica-{core.broker.id}"))
    assert len(answers) == 1 and answers[0] is not None, f"{api.name}: {answers}"
    reply = encode_response_bytes(api, version, 1, _materialize(answers[0]))
    return decode_response(memoryview(reply)[4:], api, version).body
