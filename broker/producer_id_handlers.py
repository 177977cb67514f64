"""Handler of InitProducerId (idempotent producers).

Not served yet: the table is empty, so a broker does not advertise the API.
"""

from __future__ import annotations

from broker.handlers import Handler

PRODUCER_ID_HANDLERS: dict[int, Handler] = {}
