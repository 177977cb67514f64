"""The controller's voter set from its ``controller_quorum_voters`` setting (Kafka's
``controller.quorum.voters``: ``"1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"``).

Parsed by the one parser of that format, :func:`broker.metadata.quorum_voters.
parse_quorum_voters` (which brokers use too); a controller needs every voter's id, so
the broker-only one-voter form ``host:port`` is refused here.  :func:`voter_map`
returns ``{id: (host, port)}``; an empty text is no voter set (a single controller,
itself).  Errors are :class:`InvalidConfigError` naming ``controller_quorum_voters``.

Costs: O(length of the text).  Pure; thread-safe.
"""

from __future__ import annotations

from broker.metadata.quorum_voters import UNKNOWN_VOTER_ID, parse_quorum_voters
from clients.protocol.errors import InvalidConfigError

__all__ = ["voter_map"]


def voter_map(text: str) -> dict[int, tuple[str, int]]:
    """``{voter id: (host, port)}`` of a ``controller.quorum.voters`` text ({} if empty)."""
    if not text.strip():
        return {}
    try:
        voters = parse_quorum_voters(text)
    except InvalidConfigError as e:
        raise InvalidConfigError(f"controller_quorum_voters: {e.message}") from None
    if any(v.voter_id == UNKNOWN_VOTER_ID for v in voters):
        raise InvalidConfigError(f"controller_quorum_voters: {text!r} is not id@host:port,...")
    return {v.voter_id: (v.host, v.port) for v in voters}
