"""Broker configuration: defaults that work on a laptop, a properties file, overrides.

A config file uses Kafka's ``server.properties`` syntax (Java's properties format, read
by :func:`clients.config.properties.read_properties`: ``key=value`` lines, ``#``
comments), keys either in our snake_case (``max_request_bytes``) or Kafka's dotted form
(``socket.request.max.bytes`` is not mapped: only our names with ``.`` for ``_``, e.g.
``max.request.bytes``).  Precedence: defaults < file < explicit overrides (CLI flags).
Every value is validated; a bad key or value raises :class:`InvalidConfigError` naming
the key and, for a file, the file and line.

Bounds (every queue, pool and size is bounded):

| key                        | default     | what it bounds                                  |
|----------------------------|-------------|-------------------------------------------------|
| max_request_bytes          | 16 MiB      | one request frame; larger -> connection closed  |
| buffer_pool_bytes          | 128 MiB     | shared memory for requests and responses        |
| buffer_poolable_bytes      | 64 KiB      | size of a pooled buffer (free-list fast path)   |
| queued_max_requests        | 500         | requests handed to the main process, not done   |
| max_partial_request_bytes  | 0 (auto)    | pool memory of request frames larger than       |
|                            |             | buffer_poolable_bytes still arriving, all       |
|                            |             | network processes together; auto: a quarter of  |
|                            |             | buffer_pool_bytes, at least min(2 x             |
|                            |             | max_request_bytes, half the pool); set: from    |
|                            |             | max_request_bytes to half of buffer_pool_bytes  |
|                            |             | (broker.network.connection_shares)              |
| max_connections            | 1000        | open client connections per network process     |
| max_connections_per_ip     | 500         | open connections from one IP address, per       |
|                            |             | network process (``..._overrides``: ip:n,...)   |
| connections_max_idle_ms    | 600000      | a connection with nothing to read or write for  |
|                            |             | this long is closed                             |
| metrics_port               | -1 (none)   | the Prometheus metrics port (HTTP, GET /metrics;|
|                            |             | ``metrics_host``, default 127.0.0.1; 0 = any    |
|                            |             | free port; docs/metrics.md)                     |
| metrics_max_connections    | 16          | open connections on the metrics port            |
| metrics_max_topics         | 10000       | topics with per-topic traffic series            |
| metrics_max_lag_series     | 10000       | group partitions with lag series                |
| request_read_timeout_ms    | 30000       | a started request frame must arrive within this |
| internal_port              | -1 (none)   | the internal listener followers fetch from      |
|                            |             | (``internal_host``, default ``host``; 0 = any   |
|                            |             | free port; ``cluster start`` sets base + 200 +  |
|                            |             | id); docs/security.md                           |
| max_internal_connections   | 100         | open connections on the internal listener, per  |
|                            |             | network process (not counted in the client caps)|
| max_metadata_topics        | 1000        | topics one Metadata request may name            |
| max_fetch_partitions       | 1000        | partitions one Fetch request may name           |
| max_incremental_fetch_     | 1000        | fetch sessions (KIP-227) kept; 0: none          |
| session_cache_slots        |             |                                                 |
| min_incremental_fetch_     | 120000      | ms before a fetch session may be evicted        |
| session_eviction_ms        |             | (docs/compatibility.md, Fetch)                  |
| max_produce_partitions     | 10000       | partition entries one Produce request may name  |
|                            |             | (more: the connection is closed, unanswered)    |
| max_batch_records          | 65536       | records one produced batch may hold (its header's|
|                            |             | record_count, read before decompressing): more  |
|                            |             | is MESSAGE_TOO_LARGE (producers split the batch)|
| max_batch_decompressed_    | 16 MiB      | what one compressed batch may inflate to        |
| bytes                      |             | (decompression stops there): MESSAGE_TOO_LARGE  |
| max_produce_records        | 1048576     | records plus record headers of all batches of   |
|                            |             | one Produce: batches past it MESSAGE_TOO_LARGE  |
| max_produce_decompressed_  | 256 MiB     | what all compressed batches of one Produce may  |
| bytes                      |             | inflate to: batches past it MESSAGE_TOO_LARGE   |
| record_check_inline_bytes  | 64 KiB      | records (as sent plus inflated) of one Produce  |
|                            |             | checked on the event loop; the rest of its check|
|                            |             | runs on the record-check thread (0: all of it;  |
|                            |             | broker/handlers/record_checks.py)               |
| cluster_id                 | minikafka   | the cluster this broker belongs to: checked     |
|                            |             | against meta.properties in data_dir and by the  |
|                            |             | controller at registration (``cluster start``   |
|                            |             | gives each cluster a random id)                 |
| sasl_users_file            | (none)      | client users' SCRAM credentials (mode 600,      |
|                            |             | re-read when changed; ``cluster add-user``)     |
| client_auth_required       | false       | a connection gets nothing but ApiVersions and   |
|                            |             | the SASL exchange until it logged in; required  |
|                            |             | when ``host`` is not a loopback address unless  |
|                            |             | ``allow_anonymous_remote=true`` says otherwise  |
| authorizer_enabled         | false       | ACLs from acl_file decide what each user may do |
|                            |             | (broker.acls; needs client_auth_required);      |
|                            |             | super_users ("User:a;User:b") may do anything   |
| ssl_certfile, ssl_keyfile  | (none)      | PEM certificate chain and key: the port speaks  |
|                            |             | TLS (SSL; SASL_SSL with client_auth_required)   |
| ssl_cafile                 | (none)      | CA that client certificates and other brokers'  |
|                            |             | certificates must chain to                      |
| ssl_client_auth            | none        | requested / required: client certificates       |
| cluster_secret_file        | (none)      | the cluster's secret (mode 600): follower       |
|                            |             | fetches need a broker login (docs/security.md)  |
| connection_failed_authenti | 100         | a failed login is answered this late, then its  |
| cation_delay_ms            |             | connection is closed (Kafka's name; 0..         |
|                            |             | connections_max_idle_ms - 1; broker.auth)       |
| max_delayed_authentication | 100         | failed logins waiting for that delay (at most   |
| _failures                  |             | half of queued_max_requests); beyond, answered  |
|                            |             | and closed at once                              |
| max_failed_logins_per_user | 10          | failed logins of one name (unknown names too,   |
|                            |             | brokers' never) per failed_login_window_ms      |
|                            |             | (60000) before it is locked out for             |
|                            |             | failed_login_lockout_ms (60000): its logins     |
|                            |             | fail whatever the password                      |
| max_failed_logins_per_addr | 30          | the same per client address                     |
| ess                        |             | (broker.login_failures)                         |
| max_failed_login_entries   | 10000       | names (and addresses) tracked; the oldest is    |
|                            |             | forgotten beyond                                |
| failed_login_shared_addres | 127.0.0.1,  | addresses many clients share: not counted or    |
| ses                        | ::1         | locked out as addresses (per user still)        |
| max_fetch_wait_ms          | 30000       | a fetch's max_wait_ms is capped at this         |
| fetch_max_bytes            | 50 MiB      | bytes in one fetch response                     |
| log_cleaner_step_bytes     | 512 KiB     | log bytes one compaction step reads (the main   |
|                            |             | loop runs one step per log_cleaner_interval_ms) |
| follower_replication_throt | 0 (off)     | bytes/s a follower fetches for its replicas     |
| tled_rate                  |             | outside their ISR (a reassignment's new ones);  |
|                            |             | (static; dynamic per broker under Kafka's name) |
| log_scrub_bytes_per_second | 8 MiB       | closed segments CRC-checked in the background   |
|                            |             | (steps every log_scrub_interval_ms; 0 = off;    |
|                            |             | log_scrub_round_pause_ms, 1 h, between rounds)  |
| log_cleaner_dedupe_buffer_ | 32 MiB      | the compaction key -> offset map (accounted)    |
| bytes                      |             |                                                 |
| group_max_size             | 1000        | members plus pending member ids of one group    |
|                            |             | (GROUP_MAX_SIZE_REACHED, Kafka's key)           |
| group_max_member_metadata_ | 1 MiB       | one member's JoinGroup protocols (names and     |
| bytes                      |             | metadata) and ids; more: INVALID_REQUEST        |
| group_max_metadata_bytes   | 8 MiB       | every member's protocols, ids and assignment in |
|                            |             | one group (so the leader's JoinGroup answer and |
|                            |             | the group's record fit; GROUP_MAX_SIZE_REACHED);|
|                            |             | at most a quarter of buffer_pool_bytes is used  |
| group_coordinator_max_     | 64 MiB      | the same over every group this broker           |
| metadata_bytes             |             | coordinates (GROUP_MAX_SIZE_REACHED)            |
| group_consumer_max_size    | 200         | members of one KIP-848 consumer group (Kafka's  |
|                            |             | group.consumer.max.size; session 45 s and       |
|                            |             | heartbeat 5 s: group_consumer_session_timeout_ms|
|                            |             | and group_consumer_heartbeat_interval_ms)       |
| group_consumer_migration_  | bidirec-    | classic <-> consumer group conversion: upgrade, |
| policy                     | tional      | downgrade, disabled (broker/group/consumer/)    |

Choices where Kafka's defaults do not fit a laptop: ``segment_bytes`` 64 MiB (Kafka 1 GiB),
``buffer_pool_bytes`` 128 MiB, and ``auto_create_topics_enable`` false so an unknown
topic is a precise UNKNOWN_TOPIC_OR_PARTITION error instead of a silently created topic.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from broker.login_failures import LoginFailureLimits
from clients.config.properties import read_properties
from clients.protocol.errors import InvalidConfigError

MiB = 1024 * 1024
_CLUSTER_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
# Kafka's group.consumer.migration.policy values (broker.group.consumer.migration)
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name, or "" / "0.0.0.0"-like wildcards: assume reachable


def is_wildcard(host: str) -> bool:
    """Whether ``host`` binds every interface (not an address others can connect to)."""
    return host in ("", "0.0.0.0", "::")


def check_cluster_id(cluster_id: str) -> None:
    """A cluster id is 1-64 characters of ``A-Z a-z 0-9 . _ -`` (Kafka's are 22-character
    URL-safe base64 UUIDs, which fit)."""
    if not _CLUSTER_ID.fullmatch(cluster_id):
        raise InvalidConfigError(
            f"cluster_id must be 1-64 characters of A-Z a-z 0-9 . _ -, got {cluster_id!r}")


@dataclass(frozen=True)
class BrokerConfig:
    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str = ""  # empty: same as host
    advertised_port: int = 0  # 0: same as port
    # the internal listener: other brokers fetch from it as followers (docs/security.md);
    # -1 = none (followers use ``port``), 0 = any free port; ``cluster start`` sets one
    internal_host: str = ""  # empty: same as host
    internal_port: int = -1
    max_internal_connections: int = 100
    data_dir: str = "./data/broker-0"
    controller_address: str = ""  # "host:port" or voters "id@host:port,..."; "": standalone
    cluster_id: str = "minikafka"  # checked in meta.properties and at registration
    cluster_secret_file: str = ""  # the cluster's secret: broker logins (broker.auth)
    sasl_users_file: str = ""  # client users' SCRAM credentials (broker.users)
    client_auth_required: bool = False  # clients must log in (SASL SCRAM) first
    # password guessing (broker.login_failures; issue 30 item 4)
    connection_failed_authentication_delay_ms: int = 100  # Kafka's
    max_delayed_authentication_failures: int = 100
    max_failed_logins_per_user: int = 10
    max_failed_logins_per_address: int = 30
    failed_login_window_ms: int = 60_000
    failed_login_lockout_ms: int = 60_000
    max_failed_login_entries: int = 10_000
    failed_login_shared_addresses: str = "127.0.0.1,::1"  # counted per user only
    allow_anonymous_remote: bool = False  # serve clients without logins on a non-loopback host
    authorizer_enabled: bool = False  # ACLs (broker.acls); needs client_auth_required
    acl_file: str = ""  # the ACL rules (``cluster start``: <data_dir>/acls.txt)
    super_users: str = ""  # "User:admin;User:ops": allowed everything
    ssl_certfile: str = ""  # PEM chain: set, the port speaks TLS (broker.network.tls)
    ssl_keyfile: str = ""  # PEM key (empty: in ssl_certfile)
    ssl_cafile: str = ""  # CA for client certificates and for other brokers' ports
    ssl_client_auth: str = "none"  # none | requested | required (client certificates)
    num_network_processes: int = 1
    max_request_bytes: int = 16 * MiB
    buffer_pool_bytes: int = 128 * MiB
    buffer_poolable_bytes: int = 64 * 1024
    queued_max_requests: int = 500
    max_partial_request_bytes: int = 0  # 0: auto (connection_shares.partial_request_bytes)
    max_connections: int = 1000
    max_connections_per_ip: int = 500
    max_connections_per_ip_overrides: str = ""  # "ip:count,ip:count" (Kafka's syntax, IPs)
    connections_max_idle_ms: int = 600_000
    # the metrics port (broker.metrics): -1 = none, 0 = any free port; Prometheus text
    metrics_port: int = -1
    metrics_host: str = "127.0.0.1"
    metrics_max_connections: int = 16
    metrics_max_topics: int = 10_000  # topics with per-topic traffic series
    metrics_max_lag_series: int = 10_000  # group partitions with lag series
    request_read_timeout_ms: int = 30_000
    max_metadata_topics: int = 1_000
    max_fetch_partitions: int = 1_000  # also the partitions of one fetch session
    max_incremental_fetch_session_cache_slots: int = 1_000  # Kafka's names and defaults
    min_incremental_fetch_session_eviction_ms: int = 120_000
    max_produce_partitions: int = 10_000  # a topic's most partitions (MAX_PARTITIONS_PER_TOPIC)
    # the leader's record check of a Produce (storage/log/validator.py, docs/security.md)
    max_batch_records: int = 65_536
    max_batch_decompressed_bytes: int = 16 * MiB
    max_produce_records: int = 1_048_576
    max_produce_decompressed_bytes: int = 256 * MiB
    record_check_inline_bytes: int = 64 * 1024
    max_fetch_wait_ms: int = 30_000
    fetch_max_bytes: int = 50 * MiB
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    auto_create_topics_enable: bool = False
    # log defaults (per-topic configs override these)
    segment_bytes: int = 64 * MiB
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    max_message_bytes: int = 1 * MiB + 12
    flush_messages: int = 0  # 0 = no count-based fsync (rely on replication, like Kafka)
    flush_ms: int = 0  # 0 = no time-based fsync
    # schedules of the main loop (ms)
    retention_check_interval_ms: int = 60_000
    flush_scheduler_interval_ms: int = 1_000
    checkpoint_interval_ms: int = 5_000
    log_cleaner_interval_ms: int = 100  # one bounded compaction step (storage/cleaner.py)
    log_scrub_bytes_per_second: int = 8 * MiB  # background CRC check (storage/scrubber.py)
    log_scrub_interval_ms: int = 100  # one scrub step this often; 0 bytes/s: off
    log_scrub_round_pause_ms: int = 3_600_000  # idle this long after a whole round
    log_cleaner_step_bytes: int = 512 * 1024
    log_cleaner_dedupe_buffer_bytes: int = 32 * MiB
    # replication (used once a controller is configured)
    replica_lag_time_max_ms: int = 10_000
    replica_fetch_max_bytes: int = 1 * MiB
    replica_fetch_wait_max_ms: int = 200
    # static value of the dynamic follower.replication.throttled.rate (broker.dynamic_config):
    # bytes/s fetched for replicas outside their ISR (replication.throttle); 0: none
    follower_replication_throttled_rate: int = 0
    broker_heartbeat_interval_ms: int = 500
    broker_session_timeout_ms: int = 3_000
    # consumer groups (broker/group_coordinator.py, broker/offsets_topic.py)
    group_min_session_timeout_ms: int = 1_000  # Kafka 6000: laptop clusters detect faster
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 1_000  # members (plus pending members) per group
    group_max_member_metadata_bytes: int = 1 * MiB  # one member's protocols and ids
    group_max_metadata_bytes: int = 8 * MiB  # all members of a group, assignments too
    group_coordinator_max_metadata_bytes: int = 64 * MiB  # every group of this coordinator
    group_consumer_session_timeout_ms: int = 45_000  # KIP-848 groups: the broker's setting
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_max_size: int = 200
    group_consumer_migration_policy: str = "bidirectional"  # see broker.group.consumer
    offsets_topic_num_partitions: int = 5  # Kafka 50: a small default for a local cluster
    offsets_topic_replication_factor: int = 3  # capped at the live brokers on creation
    offsets_topic_segment_bytes: int = 100 * MiB
    offsets_commit_timeout_ms: int = 5_000  # a commit waits this long for the ISR
    offset_metadata_max_bytes: int = 4_096
    # transactions (broker/txn/): __transaction_state and the coordinator's bounds
    transaction_state_log_num_partitions: int = 5  # Kafka 50: small for a local cluster
    transaction_state_log_replication_factor: int = 3  # capped at the live brokers
    transaction_state_log_segment_bytes: int = 100 * MiB
    transaction_max_timeout_ms: int = 900_000  # InitProducerId above it: refused
    transactional_id_expiration_ms: int = 604_800_000  # idle ids are removed after it
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # KIP-890 part 1: a leader accepts a producer's first transactional batch on a
    # partition only once the coordinator confirms the partition is in its transaction
    transaction_partition_verification_enable: bool = True
    extra: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def advertised(self) -> tuple[str, int]:
        return (self.advertised_host or self.host, self.advertised_port or self.port)

    @property
    def internal_advertised(self) -> tuple[str, int] | None:
        """Where other brokers reach the internal listener (None: it has none)."""
        if self.internal_port <= 0:
            return None
        host = self.internal_host if self.internal_host and not is_wildcard(
            self.internal_host) else self.advertised[0]
        return host, self.internal_port

    def validate(self) -> BrokerConfig:
        positive = (
            "num_network_processes",
            "max_request_bytes",
            "buffer_pool_bytes",
            "buffer_poolable_bytes",
            "queued_max_requests",
            "max_connections",
            "max_connections_per_ip",
            "max_internal_connections",
            "connections_max_idle_ms",
            "request_read_timeout_ms",
            "metrics_max_connections",
            "metrics_max_topics",
            "metrics_max_lag_series",
            "max_metadata_topics",
            "max_fetch_partitions",
            "max_produce_partitions",
            "max_batch_records",
            "max_batch_decompressed_bytes",
            "max_produce_records",
            "max_produce_decompressed_bytes",
            "max_fetch_wait_ms",
            "fetch_max_bytes",
            "num_partitions",
            "default_replication_factor",
            "min_insync_replicas",
            "segment_bytes",
            "max_message_bytes",
            "retention_check_interval_ms",
            "flush_scheduler_interval_ms",
            "checkpoint_interval_ms",
            "log_cleaner_interval_ms",
            "log_scrub_interval_ms",
            "log_cleaner_step_bytes",
            "replica_lag_time_max_ms",
            "replica_fetch_max_bytes",
            "broker_heartbeat_interval_ms",
            "broker_session_timeout_ms",
            "group_min_session_timeout_ms",
            "group_max_size",
            "group_max_member_metadata_bytes",
            "group_consumer_heartbeat_interval_ms",
            "group_consumer_max_size",
            "offsets_topic_num_partitions",
            "offsets_topic_replication_factor",
            "transaction_state_log_num_partitions",
            "transaction_state_log_replication_factor",
            "transaction_max_timeout_ms",
            "transactional_id_expiration_ms",
            "transaction_abort_timed_out_transaction_cleanup_interval_ms",
            "offsets_commit_timeout_ms",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise InvalidConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.node_id < 0:
            raise InvalidConfigError(f"node_id must be >= 0, got {self.node_id}")
        check_cluster_id(self.cluster_id)
        if self.client_auth_required and not self.sasl_users_file:
            raise InvalidConfigError("client_auth_required needs a sasl_users_file")
        LoginFailureLimits.of(self).validate(self.connections_max_idle_ms)
        if not is_loopback(self.host) and not (self.client_auth_required
                                               or self.allow_anonymous_remote):
            raise InvalidConfigError(
                f"host {self.host!r} is reachable from other machines: set "
                "client_auth_required=true (clients log in; add ssl_certfile for TLS and "
                "authorizer_enabled for ACLs) or, knowingly, allow_anonymous_remote=true")
        reachable = [h for h in (self.host, *([self.internal_host or self.host]
                                              if self.internal_port >= 0 else []))
                     if not is_loopback(h)]
        if reachable and self.controller_address and not self.cluster_secret_file:
            raise InvalidConfigError(
                f"host {reachable[0]!r} is reachable from other machines: a broker of a "
                "cluster needs cluster_secret_file there (without it anyone may fetch as "
                "a follower; minikafka cluster start writes one)")
        if self.authorizer_enabled and not self.client_auth_required:
            raise InvalidConfigError("authorizer_enabled needs client_auth_required (ACLs "
                                     "name users, so every client must log in)")
        if not self.ssl_certfile and (self.ssl_keyfile or self.ssl_client_auth != "none"):
            raise InvalidConfigError("ssl_keyfile and ssl_client_auth need ssl_certfile")
        if self.ssl_client_auth not in ("none", "requested", "required"):
            raise InvalidConfigError("ssl_client_auth must be none, requested or required, "
                                     f"got {self.ssl_client_auth!r}")
        if not 0 <= self.port <= 65535:
            raise InvalidConfigError(f"port must be in 0..65535, got {self.port}")
        if not -1 <= self.internal_port <= 65535:
            raise InvalidConfigError("internal_port must be -1 (none), 0 (any free port) or "
                                     f"a port, got {self.internal_port}")
        if self.internal_port > 0 and self.internal_port == self.port:
            raise InvalidConfigError(f"internal_port must differ from port ({self.port})")
        if not -1 <= self.metrics_port <= 65535:
            raise InvalidConfigError("metrics_port must be -1 (none), 0 (any free port) or a "
                                     f"port, got {self.metrics_port}")
        if self.metrics_port > 0 and self.metrics_port in (self.port, self.internal_port):
            raise InvalidConfigError("metrics_port must differ from port and internal_port")
        if (self.metrics_port >= 0 and not is_loopback(self.metrics_host)
                and not (self.client_auth_required or self.allow_anonymous_remote)):
            raise InvalidConfigError(
                f"metrics_host {self.metrics_host!r} is reachable from other machines: set "
                "client_auth_required=true (scrapes log in with HTTP Basic as a SASL user) "
                "or, knowingly, allow_anonymous_remote=true")
        if self.num_network_processes > 64:
            raise InvalidConfigError("num_network_processes must be at most 64")
        if self.max_request_bytes > self.buffer_pool_bytes // 2:
            raise InvalidConfigError(
                f"max_request_bytes ({self.max_request_bytes}) must be at most half of "
                f"buffer_pool_bytes ({self.buffer_pool_bytes}) so one request cannot starve "
                "the pool"
            )
        if self.buffer_poolable_bytes > self.max_request_bytes:
            raise InvalidConfigError("buffer_poolable_bytes must not exceed max_request_bytes")
        if self.max_partial_request_bytes and not (
                self.max_request_bytes <= self.max_partial_request_bytes
                <= self.buffer_pool_bytes // 2):
            raise InvalidConfigError(
                f"max_partial_request_bytes ({self.max_partial_request_bytes}) must be 0 "
                f"(auto) or from max_request_bytes ({self.max_request_bytes}) to half of "
                f"buffer_pool_bytes ({self.buffer_pool_bytes // 2})")
        if self.max_batch_records > self.max_produce_records or \
                self.max_batch_decompressed_bytes > self.max_produce_decompressed_bytes:
            raise InvalidConfigError(
                "max_batch_records and max_batch_decompressed_bytes must not exceed "
                "max_produce_records and max_produce_decompressed_bytes (a batch within "
                "its bounds must fit a request)")
        if self.record_check_inline_bytes < 0:
            raise InvalidConfigError("record_check_inline_bytes must be >= 0, got "
                                     f"{self.record_check_inline_bytes}")
        if self.log_cleaner_dedupe_buffer_bytes < 1024:
            raise InvalidConfigError("log_cleaner_dedupe_buffer_bytes must be >= 1024, got "
                                     f"{self.log_cleaner_dedupe_buffer_bytes}")
        if self.follower_replication_throttled_rate < 0:
            raise InvalidConfigError("follower_replication_throttled_rate must be >= 0 "
                                     "(0 bytes/s: no throttle)")
        if self.log_scrub_bytes_per_second < 0 or self.log_scrub_round_pause_ms < 0:
            raise InvalidConfigError("log_scrub_bytes_per_second and log_scrub_round_pause_ms "
                                     "must be >= 0 (0 bytes/s: off)")
        if self.segment_bytes < 1024:
            raise InvalidConfigError(f"segment_bytes must be >= 1024, got {self.segment_bytes}")
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise InvalidConfigError("broker_heartbeat_interval_ms must be below "
                                     "broker_session_timeout_ms")
        if self.group_consumer_migration_policy not in MIGRATION_POLICIES:
            raise InvalidConfigError(f"group_consumer_migration_policy must be one of "
                                     f"{', '.join(MIGRATION_POLICIES)}")
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise InvalidConfigError("group_consumer_heartbeat_interval_ms must be below "
                                     "group_consumer_session_timeout_ms")
        if self.group_max_session_timeout_ms < self.group_min_session_timeout_ms:
            raise InvalidConfigError("group_max_session_timeout_ms must be >= "
                                     "group_min_session_timeout_ms")
        if min(self.group_initial_rebalance_delay_ms, self.offset_metadata_max_bytes,
               self.max_incremental_fetch_session_cache_slots,
               self.min_incremental_fetch_session_eviction_ms) < 0:
            raise InvalidConfigError("group_initial_rebalance_delay_ms, offset_metadata_max_"
                                     "bytes and the fetch session settings must be >= 0")
        if not (self.group_max_member_metadata_bytes <= self.group_max_metadata_bytes
                <= self.group_coordinator_max_metadata_bytes):
            raise InvalidConfigError(
                "group_max_member_metadata_bytes <= group_max_metadata_bytes <= "
                "group_coordinator_max_metadata_bytes must hold, got "
                f"{self.group_max_member_metadata_bytes}, {self.group_max_metadata_bytes}, "
                f"{self.group_coordinator_max_metadata_bytes}")
        if self.offsets_topic_segment_bytes < 1024:
            raise InvalidConfigError("offsets_topic_segment_bytes must be >= 1024")
        if self.transaction_state_log_segment_bytes < 1024:
            raise InvalidConfigError("transaction_state_log_segment_bytes must be >= 1024")
        parse_ip_overrides(self.max_connections_per_ip_overrides)
        return self

    def log_defaults(self) -> dict[str, int | None]:
        """Topic-level log settings this broker applies when a topic does not set them."""
        return {
            "segment_bytes": self.segment_bytes,
            "segment_ms": self.segment_ms,
            "retention_ms": self.retention_ms,
            "retention_bytes": self.retention_bytes,
            "max_message_bytes": self.max_message_bytes,
            "flush_messages": self.flush_messages or None,
            "flush_ms": self.flush_ms or None,
        }

    def topic_defaults(self) -> dict[str, str]:
        """Every topic-level setting with this broker's default, as strings."""
        out = {k: ("none" if v is None else str(v)) for k, v in self.log_defaults().items()}
        out["min_insync_replicas"] = str(self.min_insync_replicas)
        out["unclean_leader_election"] = "false"
        return out

    def with_overrides(
        self, overrides: Mapping[str, Any], source: str = "override"
    ) -> BrokerConfig:
        return dataclasses.replace(
            self, **coerce_config(overrides, _BROKER_DEFAULTS, "broker", source)
        ).validate()

    @classmethod
    def load(
        cls, path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
    ) -> BrokerConfig:
        config = cls()
        if path is not None:
            config = config.with_overrides(read_properties(path), str(path))
        if overrides:
            config = config.with_overrides(overrides)
        return config.validate()


_BROKER_DEFAULTS = {f.name: f.default for f in fields(BrokerConfig) if f.name != "extra"}


def coerce_config(values: Mapping[str, Any], defaults: Mapping[str, Any], kind: str,
                  source: str) -> dict[str, Any]:
    """Turn ``key=value`` settings into typed fields, each typed like its default.

    Keys may use ``.`` or ``-`` for ``_``; an unknown key or a value of the wrong type is
    an :class:`InvalidConfigError` naming the source, the key and the value.
    """
    out: dict[str, Any] = {}
    for raw_key, raw_value in values.items():
        key = str(raw_key).strip().replace(".", "_").replace("-", "_")
        if key not in defaults:
            raise InvalidConfigError(f"{source}: unknown {kind} config key {raw_key!r}")
        out[key] = _coerce(key, defaults[key], raw_value, source)
    return out


def _coerce(key: str, default: Any, value: Any, source: str) -> Any:
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise InvalidConfigError(f"{source}: {key} must be true or false, got {value!r}")
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            raise InvalidConfigError(
                f"{source}: {key} must be an integer, got {value!r}"
            ) from None
    return str(value).strip()


def parse_ip_overrides(text: str) -> dict[str, int]:
    """``max_connections_per_ip_overrides``: ``"ip:count,ip:count"`` (Kafka's
    ``max.connections.per.ip.overrides``, with IP addresses only) -> ``{ip: count}``.

    An IPv6 address is written as is (the count follows the last ``:``); a count must be
    >= 0 (0 refuses every connection from that address).  A malformed entry raises
    :class:`InvalidConfigError`."""
    out: dict[str, int] = {}
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        try:
            value = int(count)
        except ValueError:
            value = -1
        if not sep or not host.strip() or value < 0:
            raise InvalidConfigError(
                f"max_connections_per_ip_overrides: expected ip:count with count >= 0, "
                f"got {entry!r}")
        out[host.strip()] = value
    return out


def parse_overrides(pairs: Sequence[str]) -> dict[str, str]:
    """``["k=v", ...]`` from ``--override`` flags; a pair without ``=`` is an error."""
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise InvalidConfigError(f"--override expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key] = value
    return out
