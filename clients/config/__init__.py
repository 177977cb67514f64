"""Client settings as users write them: Kafka's names and Java properties files.

- :mod:`clients.config.kafka_names`: Kafka's (Java) and librdkafka's client setting
  names (``security.protocol``, ``sasl.jaas.config``, ``ssl.ca.location``,
  ``linger.ms``, ...) -> the keyword arguments of our Admin, Producer and Consumer;
- :mod:`clients.config.properties`: a Java ``.properties`` file (what Kafka's tools read
  with ``--command-config``) -> its ``key -> value`` pairs.

Used by the ``minikafka`` CLI (:mod:`clients.cli.connect`) and the Spark source
(:mod:`clients.spark.consumer_params`).  Imports ``clients.protocol`` and
``clients.network`` (the protocol names and SASL mechanisms), never a client class.
Nothing is exported here: import from the defining module.
"""
