"""Which handler serves which API: the one table the server dispatches on.

Handlers live in one module per concern (:mod:`broker.handlers` for topics, produce and
fetch; :mod:`broker.group_handlers` for the group coordinator APIs;
:mod:`broker.producer_id_handlers` for InitProducerId).  This module merges their tables
and answers ApiVersions from the merged table, so a broker advertises exactly the APIs
it serves.  Pure data: no state, safe to import anywhere in the broker.
"""

from __future__ import annotations

from broker.core import BrokerCore
from broker.group_handlers import GROUP_HANDLERS
from broker.handlers import CORE_HANDLERS, Body, Handler, Respond
from broker.producer_id_handlers import PRODUCER_ID_HANDLERS
from clients.api import APIS, ApiKey


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
