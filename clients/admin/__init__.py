"""Admin client: topics, partitions, configs, records, the cluster, and consumer groups.

:class:`Admin` is the public facade; its operations live in one part per concept, as
Kafka's admin client groups them, each holding the shared request plumbing
(:class:`~clients.admin.requests.AdminRequests`: connections by node id, the metadata,
the default timeout, the controller route) given at construction:

- **Topics** (:mod:`clients.admin.topics`): CreateTopics, DeleteTopics and
  CreatePartitions to the controller; ``list_topics`` / ``describe_topics`` by Metadata.
- **Cluster** (:mod:`clients.admin.cluster`): DescribeCluster, else Metadata.
- **Configs** (:mod:`clients.admin.configs`): DescribeConfigs, AlterConfigs (replaces
  a resource's whole set of overrides), IncrementalAlterConfigs (changes only what it
  lists); a broker resource goes to that broker, others to any broker.
- **Records** (:mod:`clients.admin.records`): DeleteRecords to each partition's leader,
  returning the new low watermarks (log start offsets).
- **Groups** (:mod:`clients.admin.groups`): ListGroups from every broker; DescribeGroups,
  DeleteGroups and OffsetFetch from each group's coordinator, offsets with their lag.
- **Offsets** (:mod:`clients.admin.offsets`): ListOffsets by time (latest, earliest, a
  timestamp) from each leader; a group's offsets set by a simple OffsetCommit, deleted by
  OffsetDelete.
- **Log dirs** (:mod:`clients.admin.log_dirs`): DescribeLogDirs from each broker.
- **ACLs** (:mod:`clients.admin.acls`): DescribeAcls, CreateAcls, DeleteAcls to any
  broker, with Kafka's AclBinding and AclBindingFilter.
- **Elections** (:mod:`clients.admin.elections`): ElectLeaders (preferred or unclean)
  to any broker, which forwards it to the controller.
- **Reassignments** (:mod:`clients.admin.reassignments`): AlterPartitionReassignments
  and ListPartitionReassignments to any broker, which forwards them to the controller.
- **SCRAM users** (:mod:`clients.admin.scram_users`): DescribeUserScramCredentials and
  AlterUserScramCredentials to any broker (passwords are salted and hashed here).

Requests go at the highest version the broker and we both serve
(:meth:`~clients.network.connection.BrokerConnection.version_for`), in Kafka's shapes
(:mod:`clients.protocol.messages`).

Per-item failures (a topic, a resource, a partition, a group) are raised as the matching
:class:`~clients.protocol.errors.MiniKafkaError` (code from the broker, message naming
the item) after all items were processed; pass ``raise_on_error=False`` to get them in
the result instead (``{item: error or None}``, or the error in place of the value).

Security: ``security_protocol``, ``sasl_*`` and ``ssl_*`` as in
:class:`~clients.consumer.consumer.Consumer` (its docstring lists them); a refused login or
certificate is raised by the call that needed the connection.

Costs: one round trip per call and broker involved (plus a metadata refresh where a
leader or the controller must be known); the facade adds one call per operation.
Thread safety: none; one thread per Admin.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from clients.admin.acls import AclAdmin, AclBinding, AclBindingFilter
from clients.admin.cluster import ClusterAdmin
from clients.admin.configs import ConfigAdmin
from clients.admin.elections import ElectionAdmin
from clients.admin.groups import GroupAdmin
from clients.admin.log_dirs import LogDirAdmin, LogDirDescription
from clients.admin.offsets import OffsetAdmin
from clients.admin.reassignments import PartitionReassignment, ReassignmentAdmin
from clients.admin.records import RecordAdmin
from clients.admin.requests import AdminRequests
from clients.admin.scram_users import (
    ScramCredentialInfo,
    ScramUserAdmin,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from clients.admin.topics import TopicAdmin
from clients.network.cluster_metadata import ClusterMetadata, parse_bootstrap
from clients.network.node_connections import NodeConnections
from clients.network.sasl import sasl_login_of
from clients.network.tls import ssl_context_of
from clients.protocol.errors import InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.types import (
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    GroupDescription,
    GroupListing,
    GroupOffset,
    NewPartitions,
    NewTopic,
    OffsetAndTimestamp,
    TopicDescription,
)

__all__ = ["Admin"]


class Admin:
    """The admin client (Kafka's Admin): each call blocks until answered or timed out."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str | None = None,
        request_timeout_ms: int = 30_000,
        security_protocol: str = "PLAINTEXT",
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | bytes | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        ssl_check_hostname: bool = True,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if not isinstance(request_timeout_ms, int) or request_timeout_ms <= 0:
            raise InvalidConfigError(f"request_timeout_ms must be > 0, got {request_timeout_ms!r}")
        self.client_id = client_id or f"admin-{os.getpid()}-{id(self):x}"
        self.request_timeout_ms = request_timeout_ms
        sasl = sasl_login_of(security_protocol, sasl_mechanism, sasl_plain_username,
                             sasl_plain_password)
        tls = ssl_context_of(security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
                             ssl_password, ssl_check_hostname, ssl_context)
        metadata = ClusterMetadata()
        net = NodeConnections(
            parse_bootstrap(bootstrap_servers), metadata, client_id=self.client_id,
            request_timeout_ms=request_timeout_ms, sasl=sasl, ssl_context=tls,
        )  # fmt: skip
        self._requests = AdminRequests(net, metadata, request_timeout_ms)
        self._topics = TopicAdmin(self._requests)
        self._cluster = ClusterAdmin(self._requests)
        self._configs = ConfigAdmin(self._requests)
        self._records = RecordAdmin(self._requests)
        self._groups = GroupAdmin(self._requests, self._records)
        self._offsets = OffsetAdmin(self._requests, self._groups)
        self._log_dirs = LogDirAdmin(self._requests)
        self._acls = AclAdmin(self._requests)
        self._elections = ElectionAdmin(self._requests)
        self._scram_users = ScramUserAdmin(self._requests)
        self._reassignments = ReassignmentAdmin(self._requests)

    # ------------------------------------------------------------ topics
    def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        """Create topics (by count and replication factor, or by replica assignments)."""
        return self._topics.create_topics(new_topics, timeout_ms=timeout_ms,
                                          validate_only=validate_only,
                                          raise_on_error=raise_on_error)

    def delete_topics(
        self,
        names: Iterable[str],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        """Delete topics with their records."""
        return self._topics.delete_topics(names, timeout_ms=timeout_ms,
                                          raise_on_error=raise_on_error)

    def delete_topics_by_id(
        self,
        topic_ids: Iterable[str],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        """Delete topics given by id (Kafka's base64 form, as ``describe_topics`` shows
        it); the result is keyed by id (an unknown one: UnknownTopicIdError)."""
        return self._topics.delete_topics_by_id(topic_ids, timeout_ms=timeout_ms,
                                                raise_on_error=raise_on_error)

    def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions | int],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        """Grow topics to ``NewPartitions.total_count`` partitions (an int is the count).

        Partitions are never removed: a count not above the current one is the broker's
        INVALID_PARTITIONS.
        """
        return self._topics.create_partitions(new_partitions, timeout_ms=timeout_ms,
                                              validate_only=validate_only,
                                              raise_on_error=raise_on_error)

    def list_topics(self, *, timeout_ms: int | None = None) -> list[str]:
        """Names of the topics the cluster knows, sorted."""
        return self._topics.list_topics(timeout_ms=timeout_ms)

    def list_topic_ids(self, *, timeout_ms: int | None = None) -> dict[str, str | None]:
        """Each topic's id (Kafka's base64 form; None when the broker has none: a
        standalone broker), by name, sorted (Kafka's ``listTopics().listings()``)."""
        return self._topics.list_topic_ids(timeout_ms=timeout_ms)

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions with leader, replicas and ISR; unknown topics raise.

        ``configs`` holds the topic's overrides when the broker is minikafka (our
        Metadata extra); use :meth:`describe_configs` for every value and its source.
        """
        return self._topics.describe_topics(names, timeout_ms=timeout_ms)

    # ------------------------------------------------------------ cluster
    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster, else Metadata)."""
        return self._cluster.describe_cluster(timeout_ms=timeout_ms)

    # ------------------------------------------------------------ configs
    def describe_configs(
        self,
        resources: Iterable[ConfigResource | tuple[ConfigResourceType | int | str, str]],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[ConfigResource, dict[str, ConfigEntry] | MiniKafkaError]:
        """Every config of each resource with its value and source (Kafka's
        describeConfigs); a failed resource raises, or maps to its error."""
        return self._configs.describe_configs(
            resources, include_synonyms=include_synonyms,
            include_documentation=include_documentation, timeout_ms=timeout_ms,
            raise_on_error=raise_on_error)  # fmt: skip

    def alter_configs(
        self,
        configs: Mapping[ConfigResource | tuple[Any, str], Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[ConfigResource, MiniKafkaError | None]:
        """Replace each resource's config overrides by the given set (AlterConfigs:
        a config not listed returns to its default; prefer
        :meth:`incremental_alter_configs`)."""
        return self._configs.alter_configs(configs, validate_only=validate_only,
                                           timeout_ms=timeout_ms,
                                           raise_on_error=raise_on_error)

    def incremental_alter_configs(
        self,
        configs: Mapping[ConfigResource | tuple[Any, str],
                         Iterable[AlterConfigOp | tuple[Any, ...]]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[ConfigResource, MiniKafkaError | None]:
        """Apply SET / DELETE / APPEND / SUBTRACT changes to each resource's configs
        (IncrementalAlterConfigs); configs not named are left as they are."""
        return self._configs.incremental_alter_configs(
            configs, validate_only=validate_only, timeout_ms=timeout_ms,
            raise_on_error=raise_on_error)  # fmt: skip

    # ------------------------------------------------------------ records
    def delete_records(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[TopicPartition, int | MiniKafkaError]:
        """Delete every record before ``offsets[tp]`` (-1: the high watermark) in each
        partition; returns the new low watermark (log start offset) of each."""
        return self._records.delete_records(offsets, timeout_ms=timeout_ms,
                                            raise_on_error=raise_on_error)

    # ------------------------------------------------------------ groups
    def list_groups(
        self, *, states: Iterable[str] | None = None, types: Iterable[str] | None = None,
        timeout_ms: int | None = None,
    ) -> list[GroupListing]:
        """Groups of every live broker (a broker that fails to answer is skipped);
        ``states`` keeps those in one of the states (Kafka's names: Stable, Empty,
        PreparingRebalance, CompletingRebalance, Dead), ``types`` those of one of the
        group types (``classic``, ``consumer``: KIP-848; any case)."""
        return self._groups.list_groups(states=states, types=types, timeout_ms=timeout_ms)

    def describe_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, GroupDescription]:
        """State, protocol and members (with decoded assignments) of each group."""
        return self._groups.describe_groups(group_ids, timeout_ms=timeout_ms)

    def delete_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:  # fmt: skip
        """Delete empty groups and their committed offsets (NON_EMPTY_GROUP while a
        member is in it, GROUP_ID_NOT_FOUND for an unknown group)."""
        return self._groups.delete_groups(group_ids, timeout_ms=timeout_ms,
                                          raise_on_error=raise_on_error)

    def list_group_offsets(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, GroupOffset]:
        """Committed offsets of ``group_id`` with each partition's high watermark."""
        return self._groups.list_group_offsets(group_id, timeout_ms=timeout_ms)

    # ------------------------------------------------------------ offsets
    def list_offsets(
        self,
        specs: Mapping[TopicPartition, int],
        *,
        isolation_level: int = 0,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[TopicPartition, OffsetAndTimestamp | MiniKafkaError]:
        """Each partition's offset for its spec: -1 latest (high watermark, or the last
        stable offset with ``isolation_level=1``), -2 earliest (log start), or a
        timestamp in ms (the first record stamped at or after it; offset -1 if none)."""
        return self._offsets.list_offsets(specs, isolation_level=isolation_level,
                                          timeout_ms=timeout_ms, raise_on_error=raise_on_error)

    def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[TopicPartition, MiniKafkaError | None]:
        """Set the group's committed offsets (Kafka's alterConsumerGroupOffsets): only
        while the group is Empty or unknown; a group with members is UNKNOWN_MEMBER_ID."""
        return self._offsets.alter_group_offsets(group_id, offsets, timeout_ms=timeout_ms,
                                                 raise_on_error=raise_on_error)

    def delete_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[TopicPartition, MiniKafkaError | None]:
        """Delete the group's committed offsets of ``partitions`` (OffsetDelete; Kafka's
        deleteConsumerGroupOffsets): only while the group has no members."""
        return self._offsets.delete_group_offsets(group_id, partitions, timeout_ms=timeout_ms,
                                                  raise_on_error=raise_on_error)

    # ------------------------------------------------------------ log dirs
    def describe_log_dirs(
        self,
        brokers: Iterable[int] | None = None,
        topics: Iterable[str] | None = None,
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[int, list[LogDirDescription] | MiniKafkaError]:
        """Each broker's log dirs and the replicas in them (None: every broker / every
        topic)."""
        return self._log_dirs.describe_log_dirs(brokers, topics, timeout_ms=timeout_ms,
                                                raise_on_error=raise_on_error)

    # ------------------------------------------------------------ ACLs
    def describe_acls(self, acl_filter: AclBindingFilter, *,
                      timeout_ms: int | None = None) -> list[AclBinding]:
        """The ACL bindings ``acl_filter`` matches (needs Describe on the cluster)."""
        return self._acls.describe_acls(acl_filter, timeout_ms=timeout_ms)

    def create_acls(self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None,
                    raise_on_error: bool = True) -> dict[AclBinding, MiniKafkaError | None]:
        """Add ACL bindings (needs Alter on the cluster); one already there is success."""
        return self._acls.create_acls(bindings, timeout_ms=timeout_ms,
                                      raise_on_error=raise_on_error)

    def delete_acls(self, filters: Iterable[AclBindingFilter], *,
                    timeout_ms: int | None = None, raise_on_error: bool = True
                    ) -> dict[AclBindingFilter, list[AclBinding] | MiniKafkaError]:
        """Remove every binding each filter matches; returns what each removed."""
        return self._acls.delete_acls(filters, timeout_ms=timeout_ms,
                                      raise_on_error=raise_on_error)

    # ------------------------------------------------------------ elections
    def elect_leaders(self, election_type: str = "preferred",
                      partitions: Iterable[TopicPartition] | None = None, *,
                      timeout_ms: int | None = None, raise_on_error: bool = True
                      ) -> dict[TopicPartition, MiniKafkaError | None]:
        """Elect the preferred (or, for offline partitions, an unclean) leader of each
        partition (None: every partition); ELECTION_NOT_NEEDED comes back as an error."""
        return self._elections.elect_leaders(election_type, partitions,
                                             timeout_ms=timeout_ms,
                                             raise_on_error=raise_on_error)

    # ------------------------------------------------------------ SCRAM users
    def describe_user_scram_credentials(
            self, users: Sequence[str] | None = None, *, timeout_ms: int | None = None,
            raise_on_error: bool = True) -> dict[str, list[ScramCredentialInfo] | MiniKafkaError]:
        """Each user's SCRAM mechanisms and iterations (None: every user)."""
        return self._scram_users.describe_user_scram_credentials(
            users, timeout_ms=timeout_ms, raise_on_error=raise_on_error)

    def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion
                                        | UserScramCredentialDeletion], *,
            timeout_ms: int | None = None,
            raise_on_error: bool = True) -> dict[str, MiniKafkaError | None]:
        """Set or delete users' SCRAM credentials (the password never leaves here)."""
        return self._scram_users.alter_user_scram_credentials(
            alterations, timeout_ms=timeout_ms, raise_on_error=raise_on_error)

    # ------------------------------------------------------------ reassignments
    def alter_partition_reassignments(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
            timeout_ms: int | None = None,
            raise_on_error: bool = True) -> dict[TopicPartition, MiniKafkaError | None]:
        """Move partitions' replicas to the given brokers (None cancels a move)."""
        return self._reassignments.alter_partition_reassignments(
            reassignments, timeout_ms=timeout_ms, raise_on_error=raise_on_error)

    def list_partition_reassignments(
            self, partitions: Iterable[TopicPartition] | None = None, *,
            timeout_ms: int | None = None) -> dict[TopicPartition, PartitionReassignment]:
        """The partitions whose reassignment is still in flight."""
        return self._reassignments.list_partition_reassignments(partitions,
                                                                timeout_ms=timeout_ms)

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._requests.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
