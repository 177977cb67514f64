"""The voter set of a controller quorum in Kafka's ``controller.quorum.voters`` form:
``"1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"`` (``id@host:port``, an IPv6
host in brackets: ``1@[::1]:9093``).

:func:`parse_quorum_voters` returns ``{id: (host, port)}``; an empty text is no voter set
(a single controller, itself).  A malformed entry, a negative id, a port outside
1..65535 or an id given twice raises :class:`InvalidConfigError` naming the entry.  At
most :data:`MAX_VOTERS` voters (KRaft clusters run 1, 3 or 5).

Costs: O(length of the text).  Pure; thread-safe.
"""

from __future__ import annotations

from clients.protocol.errors import InvalidConfigError

__all__ = ["MAX_VOTERS", "parse_quorum_voters"]

MAX_VOTERS = 9


def _entry(item: str) -> tuple[int, str, int]:
    node, at, address = item.partition("@")
    host, colon, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not (at and colon and host and node.isdigit() and port.isdigit()):
        raise InvalidConfigError(
            f"controller_quorum_voters: {item!r} is not id@host:port")
    if not 1 <= int(port) <= 65535:
        raise InvalidConfigError(f"controller_quorum_voters: {item!r}: port must be in "
                                 "1..65535")
    return int(node), host, int(port)


def parse_quorum_voters(text: str) -> dict[int, tuple[str, int]]:
    """``{voter id: (host, port)}`` of a ``controller.quorum.voters`` text ({} if empty)."""
    voters: dict[int, tuple[str, int]] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        node, host, port = _entry(item)
        if node in voters:
            raise InvalidConfigError(f"controller_quorum_voters: voter {node} given twice")
        voters[node] = (host, port)
    if len(voters) > MAX_VOTERS:
        raise InvalidConfigError(f"controller_quorum_voters: {len(voters)} voters, at most "
                                 f"{MAX_VOTERS}")
    return voters
