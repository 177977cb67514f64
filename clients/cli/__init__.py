"""The ``minikafka`` command line.

What lives here: ``main`` (the parser and :func:`~clients.cli.main.main`), one module
per command (``topics``, ``produce``, ``consume``, ``bench``, ``demo``, ``groups``,
``workload`` with ``verify``; the commands modelled on Kafka's other operator tools,
``configs``, ``get-offsets``, ``delete-records``, ``log-dirs``, in
:mod:`clients.cli.admin_tools`), ``record_format`` (how ``consume`` prints a record),
``common`` (``CliError``, ``DEFAULT_BOOTSTRAP``, ``client_properties``: what the command
modules share, so none imports ``main``), ``actions`` (an action as a subcommand or as
Kafka's ``--action`` flag), ``connect`` (a client command's settings, ``--command-config``
and ``-X``, and its first contact with the cluster), and ``__main__`` (``python -m
clients.cli``).  The console
script is ``minikafka = clients.cli.main:main``.

May import any other room of ``clients``; never ``broker``, ``replication`` or
``storage``: the server commands (``broker``, ``cluster``) run them as separate
``python -m broker ...`` processes.  Nothing is exported here.
"""
