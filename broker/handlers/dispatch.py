"""Which handler serves which API: the one table the server dispatches on.

Handlers live in one module per concern (:mod:`broker.handlers` for topics, produce and
fetch; :mod:`broker.handlers.groups` for the group coordinator APIs;
:mod:`broker.handlers.producer_ids` for InitProducerId).  This module merges their tables
and answers ApiVersions from the merged table, so a broker advertises exactly the APIs
it serves.  Pure data: no state, safe to import anywhere in the broker.
"""

from __future__ import annotations

from broker.core import BrokerCore
from broker.handlers.common import Body, Handler, Respond
from broker.handlers.groups import GROUP_HANDLERS
from broker.handlers.produce_topics import CORE_HANDLERS
from broker.handlers.producer_ids import PRODUCER_ID_HANDLERS
from clients.protocol.api_keys import ApiKey
from clients.protocol.registry import APIS


def handle_api_versions(core: BrokerCore, body: Body, respond: Respond) -> None:
    respond({
        "error_code": 0,
        "api_keys": [
            {"api_key": int(k), "min_version": APIS[ApiKey(k)].min_version,
             "max_version": APIS[ApiKey(k)].max_version}
            for k in sorted(HANDLERS)
        ],
    })


HANDLERS: dict[int, Handler] = {
    ApiKey.API_VERSIONS: handle_api_versions,
    **CORE_HANDLERS,
    **GROUP_HANDLERS,
    **PRODUCER_ID_HANDLERS,
}
