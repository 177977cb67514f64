"""The replica manager's rooms: what a broker keeps about the replicas it hosts.

- :mod:`~broker.replica.topic_configs`: a topic's settings, their validation and the one
  path by which they reach hosted logs.
- :mod:`~broker.replica.isr_proposals`: the ISR changes this broker proposes as a leader
  (AlterPartition), with their in-flight state.
- :mod:`~broker.replica.recovery_marks`: what log recovery did at startup, and the
  recovery-cut marks reported to the controller until a replica heals.
- :mod:`~broker.replica.damage_repair`: the scrubber's and recovery's damaged ranges and
  how each is repaired from another replica.

:class:`broker.core.BrokerCore` composes them.  All are sans-IO (no sockets, no event
loop); none is thread-safe: one event loop owns them.
"""
