"""Every API we serve, declared once: API key -> :class:`~clients.protocol.api_keys.Api`.

The declarations are grouped by area in :mod:`clients.protocol.messages`; this module
gathers them.  ``APIS`` is what a broker's ApiVersions answer advertises and what the
codec (:mod:`clients.protocol.codec`) looks requests up in.

Costs: importing declares every API (codecs compile on first use).  Thread/process
safety: the registry is immutable after import.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api
from clients.protocol.messages import (
    admin,
    consumer_groups,
    controller,
    groups,
    metadata,
    produce_fetch,
    replicas,
    sasl,
    security,
    transactions,
)

APIS: dict[int, Api] = {
    api.key: api
    for module in (produce_fetch, metadata, groups, consumer_groups, admin, sasl, controller,
                   transactions, security, replicas)
    for api in vars(module).values()
    if isinstance(api, Api)
}
