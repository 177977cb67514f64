"""Which handler serves which API: the one table the server dispatches on.

Handlers live in one module per concept, each with its own table:
:mod:`broker.handlers.topics` (Metadata, CreateTopics, DeleteTopics, CreatePartitions,
DescribeCluster), :mod:`broker.handlers.configs` (DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs), :mod:`broker.handlers.produce` (Produce),
:mod:`broker.handlers.fetch` (Fetch, ListOffsets, OffsetsForLeaderEpoch, DescribeLogDirs),
:mod:`broker.handlers.records` (DeleteRecords), :mod:`broker.handlers.groups` (the group
coordinator APIs, DeleteGroups included), :mod:`broker.handlers.group_admin.offset_delete`
(OffsetDelete), :mod:`broker.handlers.producer_ids`
(InitProducerId), :mod:`broker.handlers.partition_txns` (WriteTxnMarkers,
DescribeProducers) and :mod:`broker.handlers.transactions_coordinator` (AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions); the security and
replica-placement admin APIs are in :mod:`broker.handlers.admin` (DescribeAcls,
CreateAcls, DeleteAcls in :mod:`broker.handlers.admin.acls`, ElectLeaders in
:mod:`broker.handlers.admin.elect_leaders`, DescribeUserScramCredentials and
AlterUserScramCredentials in :mod:`broker.handlers.admin.scram_users`,
AlterPartitionReassignments and ListPartitionReassignments in
:mod:`broker.handlers.admin.reassignments`).  This
module merges their tables and answers ApiVersions from the merged table, so a broker
advertises exactly the APIs it serves.  Pure data: no state, safe to import anywhere in
the broker above the handlers (the server, tests).
"""

from __future__ import annotations

from broker.handlers.admin.acls import ACL_HANDLERS
from broker.handlers.admin.elect_leaders import ELECT_LEADERS_HANDLERS
from broker.handlers.admin.reassignments import REASSIGNMENT_HANDLERS
from broker.handlers.admin.scram_users import SCRAM_USER_HANDLERS
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Body, Handler, RequestContext, serves
from broker.handlers.configs import CONFIG_HANDLERS
from broker.handlers.fetch import FETCH_HANDLERS
from broker.handlers.group_admin.offset_delete import OFFSET_DELETE_HANDLERS
from broker.handlers.groups import GROUP_HANDLERS
from broker.handlers.log_queries.log_dirs import LOG_DIRS_HANDLERS
from broker.handlers.log_queries.offsets import OFFSET_QUERY_HANDLERS
from broker.handlers.partition_txns import PARTITION_TXN_HANDLERS
from broker.handlers.produce import PRODUCE_HANDLERS
from broker.handlers.producer_ids import PRODUCER_ID_HANDLERS
from broker.handlers.records import RECORDS_HANDLERS
from broker.handlers.topics import TOPIC_HANDLERS
from broker.handlers.transactions_coordinator import TRANSACTION_COORDINATOR_HANDLERS
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ApiVersionsResponseApiKey,
)
from clients.protocol.registry import APIS


def served_api_versions() -> list[ApiVersionsResponseApiKey]:
    """The ApiVersions entries of every API this broker serves (its handler table)."""
    return [
        {"api_key": int(k), "min_version": APIS[k].min_version, "max_version": APIS[k].max_version}
        for k in sorted({*HANDLERS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
    ]


def handle_api_versions(core: HandlerCore, body: ApiVersionsRequest,
                        respond: Respond[ApiVersionsResponse], ctx: RequestContext) -> None:
    respond({"error_code": 0, "api_keys": served_api_versions(), "throttle_time_ms": 0})


def unsupported_api_versions_answer() -> Body:  # (goes to the server's encoder as is)
    """Kafka's answer to an ApiVersions version we do not serve (sent at v0, which every
    client reads): UNSUPPORTED_VERSION and the versions of ApiVersions we do serve, so the
    client retries at one of them."""
    api = APIS[ApiKey.API_VERSIONS]
    return {
        "error_code": int(ErrorCode.UNSUPPORTED_VERSION),
        "api_keys": [{"api_key": int(api.key), "min_version": api.min_version,
                      "max_version": api.max_version}],
    }


HANDLERS: dict[int, Handler] = {
    ApiKey.API_VERSIONS: serves(handle_api_versions),
    **TOPIC_HANDLERS,
    **CONFIG_HANDLERS,
    **RECORDS_HANDLERS,
    **PRODUCE_HANDLERS,
    **FETCH_HANDLERS,
    **OFFSET_QUERY_HANDLERS,
    **LOG_DIRS_HANDLERS,
    **GROUP_HANDLERS,
    **OFFSET_DELETE_HANDLERS,
    **PRODUCER_ID_HANDLERS,
    **PARTITION_TXN_HANDLERS,
    **TRANSACTION_COORDINATOR_HANDLERS,
    **ACL_HANDLERS,
    **ELECT_LEADERS_HANDLERS,
    **SCRAM_USER_HANDLERS,
    **REASSIGNMENT_HANDLERS,
}
