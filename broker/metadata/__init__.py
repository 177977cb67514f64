"""Cluster metadata (controller and brokers alike): the records and the image built from them.

- :mod:`~broker.metadata.records` - the record types of the ``__cluster_metadata`` log,
  each declared once as a schema-language ``Struct``, their semantic validation and
  msgpack codec (the record table is there);
- :mod:`~broker.metadata.msgpack_form` - the schema language's msgpack form: codec and
  type checks derived from a ``Struct``, for the metadata log and the offsets topic
  (and why their bytes stayed msgpack);
- :mod:`~broker.metadata.image` - ``MetadataImage``, built by applying records in offset
  order (brokers as ``BrokerInfo``, topics as ``TopicInfo``, partitions as
  ``PartitionRegistration``), with its snapshot file format (the byte table is there)
  and invariants;
- :mod:`~broker.metadata.follower` - ``MetadataFollower``, a broker's link to the
  controller: registration, heartbeats, and the metadata log pulled and applied to the
  broker's image;
- :mod:`~broker.metadata.alter_partition` - ``AlterPartitionManager``, a leader's ISR
  proposals sent to the controller over the same connection and their answers handed
  back;
- :mod:`~broker.metadata.topic_config_checks` - a topic's config overrides checked as
  Kafka checks them, errors in Kafka's names and words (the controller's and a
  standalone broker's one checker);
- :mod:`~broker.metadata.topic_shape_checks` - partition counts and replication factors
  checked the same way (INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, Kafka's words);
- :mod:`~broker.metadata.replica_plan` (pure) and :mod:`~broker.metadata.replica_dirs`
  (its disk side, with :mod:`storage`) - which replicas a broker hosts, and the topic id
  each replica directory's ``partition.metadata`` names (old files relabelled, another
  topic's directory never adopted).

Imports: ``msgpack_form``, ``records``, ``image`` and the two ``topic_*_checks`` (one
also uses :mod:`storage.config`) are pure and use only ``clients.protocol`` and
``clients.records`` (plus msgpack and crc32c), so the controller and the broker share
them; ``follower`` and ``alter_partition`` (broker side only) also use
:mod:`broker.async_client`, and
:mod:`broker.core` for types only.  Nothing here imports the controller.

Costs and thread-safety: see those modules (records are immutable; an image belongs to
one thread).  Exports nothing: import from the defining module.
"""
