"""Handlers of Kafka's security and replica-placement admin APIs, one module per concept:
``acl_bindings`` (Kafka's ACL bindings and filters <-> the rules of :mod:`broker.acls`),
``acls`` (DescribeAcls, CreateAcls, DeleteAcls over the ACL file every broker reads),
``scram_users`` (DescribeUserScramCredentials, AlterUserScramCredentials over the users
file, :mod:`broker.users`), ``elect_leaders`` (ElectLeaders) and ``reassignments``
(AlterPartitionReassignments, ListPartitionReassignments), both forwarded to the
controller through ``forward``.  Each module has its table of handlers, merged by
:mod:`broker.handlers.dispatch`.  Same import rules as :mod:`broker.handlers`; nothing is
exported here: import from the defining module.
"""
