"""Controller configuration: defaults for a local cluster, a properties file, overrides.

Same syntax and precedence as :mod:`broker.config` (``key=value`` lines, ``#`` comments,
``.`` or ``-`` accepted for ``_``; defaults < file < overrides); a bad key or value raises
:class:`InvalidConfigError` naming the key (and the file and line for a file).

| key                                  | default    | meaning / bound                             |
|--------------------------------------|------------|---------------------------------------------|
| host, port                           | 127.0.0.1, 9093 | listen address (port 0: kernel chooses)|
| data_dir                             | ./data/controller | metadata log and snapshots           |
| node_id                              | 1          | this controller's id in the quorum (>= 0)   |
| controller_quorum_voters             | (none)     | Kafka's ``id@host:port,...``                |
|                                      |            | (:mod:`broker.controller.quorum.voters`);   |
|                                      |            | none, or only this node: a single voter.    |
|                                      |            | Several: the process runs the KRaft quorum  |
|                                      |            | (:mod:`~.quorum.metadata_quorum`,           |
|                                      |            | docs/quorum.md)                             |
| quorum_election_timeout_ms           | 1000       | Kafka's; randomized to [t, 2t)              |
| quorum_fetch_timeout_ms              | 2000       | Kafka's; follower: leader lost; leader:     |
|                                      |            | check quorum                                |
| quorum_commit_timeout_ms             | 5000       | a change not committed within it is         |
|                                      |            | answered REQUEST_TIMED_OUT (NOT_CONTROLLER  |
|                                      |            | if this voter lost leadership first)        |
| quorum_cut_log_at_snapshot           | false      | a voter drops its log below each snapshot   |
|                                      |            | (a voter behind: FetchSnapshot).  Off:      |
|                                      |            | brokers cannot read a cut log yet           |
| cluster_id                           | minikafka  | checked against meta.properties in data_dir;|
|                                      |            | brokers registering with another id are     |
|                                      |            | refused (INCONSISTENT_CLUSTER_ID)           |
| cluster_secret_file                  | (none)     | the cluster's secret (mode 600): every API  |
|                                      |            | but ApiVersions and SASL needs a broker     |
|                                      |            | login (:mod:`broker.auth`)                  |
| broker_session_timeout_ms            | 2000       | a broker silent this long is fenced (small  |
|                                      |            | enough for a <= 3 s failover locally)       |
| controller_tick_interval_ms          | 100        | how often sessions are checked              |
| leader_imbalance_check_interval_ms   | 30000      | preferred-leader election period            |
| auto_leader_rebalance_enable         | true       | run preferred-leader elections at all       |
| metadata_snapshot_interval_records   | 1000       | records between two snapshots (also each    |
|                                      |            | quorum voter's, docs/quorum.md)             |
| metadata_max_batch_records           | 1000       | records per metadata log batch              |
| num_partitions                       | 1          | CreateTopics num_partitions = -1            |
| default_replication_factor           | 1          | CreateTopics replication_factor = -1        |
| min_insync_replicas                  | 1          | topic default for min_insync_replicas       |
| unclean_leader_election              | false      | topic default for unclean_leader_election   |
| max_partitions_per_topic             | 10000      | bound on one topic's partition count        |
| max_request_bytes                    | 8 MiB      | one request frame; larger closes the socket |
| max_connections                      | 1000       | open client connections; beyond, a new one  |
|                                      |            | may only take a reserved broker place       |
| max_connections_per_ip               | 500        | open client connections from one address    |
|                                      |            | (``..._overrides``: "ip:n,ip:n")            |
| reserved_broker_connections          | 64         | places kept for brokers: a connection taken |
|                                      |            | beyond the client limits must call a broker |
|                                      |            | API first, and is closed after              |
|                                      |            | broker_session_timeout_ms without a request |
| connections_max_idle_ms              | 600000     | a client connection with no request for     |
|                                      |            | this long is closed                         |
| request_read_timeout_ms              | 30000      | a started frame must arrive within this;    |
|                                      |            | with a secret, a broker login too (counted  |
|                                      |            | from the connection's opening)              |
| metrics_port                         | -1 (none)  | the Prometheus metrics port (HTTP; 0: any   |
|                                      |            | free port; docs/metrics.md); metrics_host   |
|                                      |            | 127.0.0.1 (loopback only: no logins there)  |
| metrics_max_connections              | 16         | open connections on the metrics port        |
| max_metadata_topics                  | 1000       | topics one Metadata request may name        |
| max_fetch_partitions                 | 1000       | partitions one Fetch request may name       |
| max_fetch_wait_ms                    | 30000      | a metadata fetch's max_wait_ms is capped    |
| ssl_certfile, ssl_keyfile            | (none)     | TLS on the controller's port (PEM; brokers  |
|                                      |            | of a TLS cluster connect with TLS too)      |
| ssl_cafile                           | (none)     | CA that client certificates must chain to   |
| ssl_client_auth                      | none       | none / requested / required (mTLS)          |
| connection_failed_authentication_    | 100        | a failed login is answered this late, then  |
| delay_ms                             |            | its connection closed (Kafka's name; below  |
|                                      |            | connections_max_idle_ms; 0: at once)        |
| max_delayed_authentication_failures  | 100        | failed logins waiting for that delay;       |
|                                      |            | beyond, answered and closed at once         |
| max_failed_logins_per_user,          | 10, 30     | failed logins of one name (brokers' never   |
| max_failed_logins_per_address        |            | counted) / from one address per             |
|                                      |            | failed_login_window_ms (60000) before it is |
|                                      |            | locked out for failed_login_lockout_ms      |
|                                      |            | (60000) (:mod:`broker.login_failures`)      |
| max_failed_login_entries             | 10000      | names (and addresses) tracked               |
| failed_login_shared_addresses        | 127.0.0.1, | not counted as addresses (per user still)   |
|                                      | ::1        |                                             |

Immutable (frozen dataclass); safe to share.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from broker.config import (
    check_cluster_id,
    coerce_config,
    is_loopback,
    parse_ip_overrides,
)
from broker.controller.quorum.voters import voter_map
from broker.login_failures import LoginFailureLimits
from broker.metadata.topic_config_checks import TopicConfigPairs, check_topic_configs
from broker.network.tls import server_context
from clients.config.properties import read_properties
from clients.protocol.errors import InvalidConfigError

MiB = 1024 * 1024


@dataclass(frozen=True)
class ControllerConfig:
    host: str = "127.0.0.1"
    port: int = 9093
    data_dir: str = "./data/controller"
    node_id: int = 1  # this controller's id among controller_quorum_voters
    controller_quorum_voters: str = ""  # Kafka's "id@host:port,...": none = itself alone
    quorum_election_timeout_ms: int = 1_000
    quorum_fetch_timeout_ms: int = 2_000
    quorum_commit_timeout_ms: int = 5_000
    quorum_cut_log_at_snapshot: bool = False  # brokers cannot read a cut log yet
    cluster_id: str = "minikafka"
    cluster_secret_file: str = ""  # brokers authenticate with it (broker.auth)
    broker_session_timeout_ms: int = 2_000
    controller_tick_interval_ms: int = 100
    leader_imbalance_check_interval_ms: int = 30_000
    auto_leader_rebalance_enable: bool = True
    metadata_snapshot_interval_records: int = 1_000
    metadata_max_batch_records: int = 1_000
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    max_partitions_per_topic: int = 10_000
    max_request_bytes: int = 8 * MiB
    max_connections: int = 1_000
    max_fetch_wait_ms: int = 30_000
    max_connections_per_ip: int = 500
    max_connections_per_ip_overrides: str = ""
    reserved_broker_connections: int = 64
    connections_max_idle_ms: int = 600_000
    request_read_timeout_ms: int = 30_000
    # the metrics port (broker.metrics; docs/metrics.md): -1 = none, 0 = any free port
    metrics_port: int = -1
    metrics_host: str = "127.0.0.1"  # loopback only: the controller has no user logins
    metrics_max_connections: int = 16
    max_metadata_topics: int = 1_000
    max_fetch_partitions: int = 1_000
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_cafile: str = ""
    ssl_client_auth: str = "none"
    # password guessing (broker.login_failures; issue 30 item 4)
    connection_failed_authentication_delay_ms: int = 100  # Kafka's; 0: at once
    max_delayed_authentication_failures: int = 100
    max_failed_logins_per_user: int = 10
    max_failed_logins_per_address: int = 30
    failed_login_window_ms: int = 60_000
    failed_login_lockout_ms: int = 60_000
    max_failed_login_entries: int = 10_000
    failed_login_shared_addresses: str = "127.0.0.1,::1"  # counted per user only

    def validate(self) -> ControllerConfig:
        LoginFailureLimits.of(self).validate(self.connections_max_idle_ms)
        for f in fields(self):
            value = getattr(self, f.name)
            if (isinstance(value, int) and not isinstance(value, bool)
                    and f.name not in ("port", "connection_failed_authentication_delay_ms",
                                       "metrics_port", "node_id")
                    and value <= 0):
                raise InvalidConfigError(f"{f.name} must be positive, got {value}")
        if not 0 <= self.port <= 65535:
            raise InvalidConfigError(f"port must be in 0..65535, got {self.port}")
        if not -1 <= self.metrics_port <= 65535 or (self.metrics_port > 0
                                                    and self.metrics_port == self.port):
            raise InvalidConfigError("metrics_port must be -1 (none), 0 (any free port) or a "
                                     f"port other than port, got {self.metrics_port}")
        if self.metrics_port >= 0 and not is_loopback(self.metrics_host):
            raise InvalidConfigError(f"metrics_host {self.metrics_host!r} is reachable from "
                                     "other machines: the controller's metrics port has no "
                                     "logins, so it listens on a loopback address only")
        if not is_loopback(self.host) and not self.cluster_secret_file:
            raise InvalidConfigError(
                f"host {self.host!r} is reachable from other machines: the controller "
                "needs cluster_secret_file there (without it anyone may register brokers "
                "and read the metadata log; minikafka cluster start writes one)")
        if self.default_replication_factor > 32767:
            raise InvalidConfigError("default_replication_factor must be at most 32767")
        if self.max_request_bytes < 1024:
            raise InvalidConfigError("max_request_bytes must be at least 1024")
        check_cluster_id(self.cluster_id)
        self._check_quorum()
        parse_ip_overrides(self.max_connections_per_ip_overrides)
        self.tls_context()  # a bad file or mode: InvalidConfigError naming it, at start
        return self

    def _check_quorum(self) -> None:
        if self.node_id < 0:
            raise InvalidConfigError(f"node_id must be >= 0, got {self.node_id}")
        voters = voter_map(self.controller_quorum_voters)
        if voters and self.node_id not in voters:
            raise InvalidConfigError(f"node_id {self.node_id} is not one of the "
                                     f"controller_quorum_voters {sorted(voters)}")

    def tls_context(self) -> ssl.SSLContext | None:
        """The port's TLS context (None: plaintext)."""
        if not self.ssl_certfile:
            if self.ssl_keyfile or self.ssl_client_auth != "none":
                raise InvalidConfigError("ssl_keyfile and ssl_client_auth need ssl_certfile")
            return None
        return server_context(self.ssl_certfile, self.ssl_keyfile, self.ssl_cafile,
                              self.ssl_client_auth)

    def with_overrides(self, overrides: Mapping[str, Any],
                       source: str = "override") -> ControllerConfig:
        return dataclasses.replace(
            self, **coerce_config(overrides, _DEFAULTS, "controller", source)).validate()

    @classmethod
    def load(cls, path: str | Path | None = None,
             overrides: Mapping[str, Any] | None = None) -> ControllerConfig:
        config = cls()
        if path is not None:
            config = config.with_overrides(read_properties(path), str(path))
        if overrides:
            config = config.with_overrides(overrides)
        return config.validate()


_DEFAULTS = {f.name: f.default for f in fields(ControllerConfig)}


# ---------------------------------------------------------------- topic configs

def validate_topic_configs(configs: TopicConfigPairs,
                           defaults: ControllerConfig) -> dict[str, str]:
    """Check a topic's config overrides (a map, or CreateTopics' ``(name, value)`` pairs)
    with :func:`broker.metadata.topic_config_checks.check_topic_configs` (Kafka's names
    and messages, InvalidConfigError); return them normalized under our keys.

    The result always holds ``min_insync_replicas`` and ``unclean_leader_election``,
    filled from the controller's defaults, so a broker needs no controller config to know
    them.
    """
    out = check_topic_configs(configs)
    out.setdefault("min_insync_replicas", str(defaults.min_insync_replicas))
    out.setdefault("unclean_leader_election",
                   "true" if defaults.unclean_leader_election else "false")
    return out
