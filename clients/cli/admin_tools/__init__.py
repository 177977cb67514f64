"""The ``minikafka`` commands modelled on Kafka's operator tools, one module per command:
``configs`` (kafka-configs.sh), ``get_offsets`` (kafka-get-offsets.sh),
``delete_records`` (kafka-delete-records.sh), ``log_dirs`` (kafka-log-dirs.sh), and
``reset_offsets`` (kafka-consumer-groups.sh ``--reset-offsets``, which the ``groups``
command of :mod:`clients.cli.groups` runs).

Each command module has ``add_parser(sub, client)`` like the modules of
:mod:`clients.cli`, registered by :mod:`clients.cli.main`; they talk to the cluster
through :class:`clients.admin.Admin` only.  Nothing is exported here.
"""
