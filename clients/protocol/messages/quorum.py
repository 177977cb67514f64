"""The KRaft quorum APIs between controllers (KIP-595, KIP-630, KIP-853, KIP-996): Vote
(52), BeginQuorumEpoch (53), EndQuorumEpoch (54), DescribeQuorum (55), FetchSnapshot (59).

Voters send the first three to each other; DescribeQuorum is asked of any voter by brokers,
voters and ``cluster status``.  Voter-to-voter replication is Fetch (v12+, of
``__cluster_metadata`` partition 0, declared in :mod:`.produce_fetch`), as in KRaft.

Layouts are Kafka's (apache/kafka ``clients/src/main/resources/common/message/*.json``),
field names in snake_case; each message carries one topic (``__cluster_metadata``) and one
partition (0), as Kafka's do.  Versions declared and served:

=================  ========  ========  ==================================================
API                served    flexible  what the versions add
=================  ========  ========  ==================================================
Vote               0-2       0+        v1 voter id and directory ids, leader endpoints
                                       (tagged, response); v2 ``pre_vote`` (KIP-996)
BeginQuorumEpoch   0-1       1+        v1 voter id, voter directory id, leader endpoints
EndQuorumEpoch     0-1       1+        v1 ``preferred_candidates`` (with directory ids)
                                       replace ``preferred_successors``, leader endpoints
DescribeQuorum     0-1       0+        v1 per replica ``last_fetch_timestamp`` and
                                       ``last_caught_up_timestamp``
FetchSnapshot      0         0+        (v1: replica directory id, leader endpoints; not
                                       served)
=================  ========  ========  ==================================================

Our voters send Vote v2 (PreVote needs it), FetchSnapshot v0, the others at v1.
DescribeQuorum v2 (KIP-853: directory ids, the nodes' listeners) is not served.
Endpoint ports are uint16 (Kafka's current declarations; an earlier draft had int32).
DescribeQuorum is checked against kafka-python's copy of Kafka's schema
(tests/clients/protocol/test_kafka_oracle.py); the others are not in kafka-python.  No
tagged extras of ours.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.messages.produce_fetch import LEADER_ID_AND_EPOCH, SNAPSHOT_ID
from clients.protocol.schema import (
    BOOL,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UUID,
    Array,
    Field,
    Struct,
)


def _node_endpoints(versions: str) -> Field:
    """Kafka's tagged ``NodeEndpoints`` (tag 0) of the quorum responses: the leader's address."""
    return Field("node_endpoints", Array(Struct(
        Field("node_id", INT32),
        Field("host", STRING),
        Field("port", UINT16),
    )), versions, tag=0, tagged=versions)  # fmt: skip


def _leader_endpoints(versions: str) -> Field:
    """Kafka's ``LeaderEndpoints`` of BeginQuorumEpoch / EndQuorumEpoch requests."""
    return Field("leader_endpoints", Array(Struct(
        Field("name", STRING),
        Field("host", STRING),
        Field("port", UINT16),
    )), versions)  # fmt: skip


def _cluster_id() -> Field:
    return Field("cluster_id", STRING, nullable="0+", default=None)


# Kafka's common struct of DescribeQuorum: one voter's (or observer's) progress.
REPLICA_STATE = Struct(
    Field("replica_id", INT32),
    Field("log_end_offset", INT64, default=-1),  # -1: unknown
    Field("last_fetch_timestamp", INT64, "1+", default=-1),  # leader's wall clock ms
    Field("last_caught_up_timestamp", INT64, "1+", default=-1),
    label="ReplicaState",
)

VOTE = Api(
    ApiKey.VOTE, "Vote", "0-2", "0+",
    request=Struct(
        _cluster_id(),
        Field("voter_id", INT32, "1+", default=-1),  # the receiving voter
        Field("topics", Array(Struct(
            Field("topic_name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("replica_epoch", INT32),  # v0-1: CandidateEpoch
                Field("replica_id", INT32),  # v0-1: CandidateId
                Field("replica_directory_id", UUID, "1+"),
                Field("voter_directory_id", UUID, "1+"),
                Field("last_offset_epoch", INT32),
                Field("last_offset", INT64),  # the sender's log end offset
                Field("pre_vote", BOOL, "2+"),
            ))),
        ))),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field("topics", Array(Struct(
            Field("topic_name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("leader_id", INT32, default=-1),
                Field("leader_epoch", INT32, default=-1),
                Field("vote_granted", BOOL),
            ))),
        ))),
        _node_endpoints("1+"),
    ),
)  # fmt: skip

BEGIN_QUORUM_EPOCH = Api(
    ApiKey.BEGIN_QUORUM_EPOCH, "BeginQuorumEpoch", "0-1", "1+",
    request=Struct(
        _cluster_id(),
        Field("voter_id", INT32, "1+", default=-1),  # the receiving voter
        Field("topics", Array(Struct(
            Field("topic_name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("voter_directory_id", UUID, "1+"),
                Field("leader_id", INT32),
                Field("leader_epoch", INT32),
            ))),
        ))),
        _leader_endpoints("1+"),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field("topics", Array(Struct(
            Field("topic_name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("leader_id", INT32, default=-1),
                Field("leader_epoch", INT32, default=-1),
            ))),
        ))),
        _node_endpoints("1+"),
    ),
)  # fmt: skip

END_QUORUM_EPOCH = Api(
    ApiKey.END_QUORUM_EPOCH, "EndQuorumEpoch", "0-1", "1+",
    request=Struct(
        _cluster_id(),
        Field("topics", Array(Struct(
            Field("topic_name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("leader_id", INT32),  # the resigning leader
                Field("leader_epoch", INT32),
                Field("preferred_successors", Array(INT32), "0"),
                Field("preferred_candidates", Array(Struct(
                    Field("candidate_id", INT32),
                    Field("candidate_directory_id", UUID),
                )), "1+"),
            ))),
        ))),
        _leader_endpoints("1+"),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field("topics", Array(Struct(
            Field("topic_name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("leader_id", INT32, default=-1),
                Field("leader_epoch", INT32, default=-1),
            ))),
        ))),
        _node_endpoints("1+"),
    ),
)  # fmt: skip

DESCRIBE_QUORUM = Api(
    ApiKey.DESCRIBE_QUORUM, "DescribeQuorum", "0-1", "0+",
    request=Struct(
        Field("topics", Array(Struct(
            Field("topic_name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
            ))),
        ))),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field("topics", Array(Struct(
            Field("topic_name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("leader_id", INT32, default=-1),
                Field("leader_epoch", INT32, default=-1),
                Field("high_watermark", INT64, default=-1),
                Field("current_voters", Array(REPLICA_STATE)),
                Field("observers", Array(REPLICA_STATE)),
            ))),
        ))),
    ),
)  # fmt: skip

FETCH_SNAPSHOT = Api(
    ApiKey.FETCH_SNAPSHOT, "FetchSnapshot", "0", "0+",
    request=Struct(
        Field("cluster_id", STRING, nullable="0+", tag=0, tagged="0+", default=None),
        Field("replica_id", INT32, default=-1),  # the fetching voter
        Field("max_bytes", INT32, default=0x7FFFFFFF),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition", INT32),
                Field("current_leader_epoch", INT32),
                Field("snapshot_id", SNAPSHOT_ID, default=None),
                Field("position", INT64),  # bytes of the snapshot already fetched
            ))),
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("index", INT32),
                Field("error_code", INT16),
                Field("snapshot_id", SNAPSHOT_ID, default=None),
                Field("current_leader", LEADER_ID_AND_EPOCH, tag=0, tagged="0+",
                      default=None),
                Field("size", INT64),  # the snapshot's total size in bytes
                Field("position", INT64),  # where ``unaligned_records`` starts
                Field("unaligned_records", RECORDS),
            ))),
        ))),
    ),
)  # fmt: skip
