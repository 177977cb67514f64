"""How a ``minikafka`` client command reaches the cluster: its client settings and the
first contact.

- :mod:`clients.cli.connect.settings`: ``--command-config FILE`` and ``-X key=value``
  (Kafka's names, :mod:`clients.config.kafka_names`) -> the keywords of the command's
  clients;
- :mod:`clients.cli.connect.probe`: one connection before the command runs, so a
  listener that needs TLS or a login, or a refused login, is said at once and plainly.

Nothing is exported here: import from the defining module.
"""
