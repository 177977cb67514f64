"""The registry of served APIs: API key -> :class:`~clients.protocol.api_keys.Api`."""

from __future__ import annotations

from clients.protocol.api_keys import Api

APIS: dict[int, Api] = {}
