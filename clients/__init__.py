"""The client side of minikafka, and the foundations the broker shares with it.

Rooms, from the bottom up (a room imports only rooms listed before it):

- ``protocol/``: framing, message schemas, API keys, error codes, topic names and
  ``TopicPartition``;
- ``records/``: the RecordBatch v2 codec (record by record, and numpy bulk);
- ``memory/``: the shared-memory BufferPool;
- ``types.py``: plain value types of the client API (RecordMetadata, ConsumerRecord,
  OffsetAndMetadata, NewTopic, the Admin descriptions);
- ``network/``: connections to brokers and the cluster metadata cache;
- ``config/``: client settings as users write them (Kafka's names, properties files);
- ``producer/``, ``consumer/``, ``admin/``: the three clients (the admin client decodes
  group assignments with :mod:`clients.consumer.group_protocol`);
- ``spark/``: the PySpark data source, the verification workload and job;
- ``cli/``: the ``minikafka`` command line.

Direction (DESIGN.md §2): ``clients`` never imports ``broker``, ``replication`` or
``storage``.  They may use only the foundations ``protocol``, ``records`` and ``memory``
(the local cluster launcher, ``broker.cluster``, also ``network``).  Nothing is exported
here: import from the defining module.
"""
