"""A local cluster on loopback: the launcher behind ``minikafka cluster`` and its status.

- :mod:`~broker.cluster.launcher` - ``start`` / ``stop`` / ``kill`` / ``restart`` /
  ``pause`` / ``resume`` of a controller and N brokers as daemonised processes
  (``python -m broker.cluster``);
- :mod:`~broker.cluster.state` - the state file ``cluster.json`` (``ClusterState``:
  ports, PIDs and command lines of every process);
- :mod:`~broker.cluster.status` - ``cluster status``: what the OS, the controller and
  each broker say.

Dependencies run launcher -> status -> state.  The processes are started by command
line (``python -m broker.controller``, ``python -m broker start``), never imported;
this package talks to them as a client, so besides ``clients.protocol`` it may use
``clients.network`` (the one broker package allowed to).  Exports nothing: import from
the defining module.
"""
