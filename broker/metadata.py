"""Cluster metadata (controller and brokers alike): the records and the image built from them.

This module is the stable import point; the code lives in two modules of one concept each:

- :mod:`broker.metadata_records` - the record types of the ``__cluster_metadata`` log, their
  field validation and msgpack codec (the record table is there);
- :mod:`broker.metadata_image` - :class:`MetadataImage`, built by applying records in offset
  order, with its snapshot file format (the byte table is there) and invariants.

Costs and thread-safety: see those modules (records are immutable; an image belongs to one
thread).  Importing this module costs nothing beyond importing those two.
"""

from __future__ import annotations

from broker.metadata_image import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from broker.metadata_records import (
    MAX_RECORD_BYTES,
    METADATA_PARTITION,
    METADATA_TOPIC,
    NO_LEADER,
    RECORD_TYPES,
    FenceBrokerRecord,
    MetadataRecord,
    MetadataRecordError,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    decode_record,
    decode_record_batches,
    encode_record,
    record_from_map,
    record_to_map,
)

__all__ = [
    "MAX_RECORD_BYTES",
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "NO_LEADER",
    "RECORD_TYPES",
    "BrokerInfo",
    "FenceBrokerRecord",
    "MetadataImage",
    "MetadataRecord",
    "MetadataRecordError",
    "PartitionRecord",
    "PartitionState",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RemoveTopicRecord",
    "TopicInfo",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "decode_record",
    "decode_record_batches",
    "encode_record",
    "record_from_map",
    "record_to_map",
]
