"""Memory bounds of the group coordinator: how much member metadata a member, a group and
a coordinator may hold (beyond Kafka, which relies on its request size).

What a member holds that a client chose is :meth:`GroupMember.footprint_bytes`
(protocol names and metadata, ids, client id and host, assignment); a group's is
:attr:`Group.footprint_bytes`; a coordinator's the sum over its groups.  The bounds
(:class:`~broker.group.protocol.GroupCoordinatorConfig`):

- :func:`join_refusal`: a JoinGroup whose member would hold more than
  ``max_member_metadata_bytes`` gets INVALID_REQUEST; one that would take its group
  past ``max_metadata_bytes``, or every group of the coordinator past
  ``coordinator_max_metadata_bytes``, gets GROUP_MAX_SIZE_REACHED (the group is full,
  bytes-wise).  A rejoin that adds no bytes is never refused.
- :func:`assignments_too_large`: a leader's SyncGroup whose assignments would take the
  group or the coordinator past its bound; the coordinator answers it as a group record
  too large to store (MESSAGE_TOO_LARGE, mapped to INVALID_COMMIT_OFFSET_SIZE for every
  member, then a rebalance).

So the leader's JoinGroup answer (every member's metadata) and the group's record
always fit.

Costs: O(the member's protocols), plus ``held_bytes()`` (O(groups)) only when the group's
own bound passes.  Pure functions: safe from any thread (on groups that thread owns).
"""

from __future__ import annotations

from collections.abc import Callable

from broker.group.members import Group, GroupMember
from broker.group.protocol import Error, GroupCoordinatorConfig
from clients.protocol.errors import ErrorCode

NEW_ID_BYTES = 37  # "-" and a uuid4 after the prefix of a member id about to be given


def join_refusal(config: GroupCoordinatorConfig, group: Group, request: GroupMember,
                 held_bytes: Callable[[], int]) -> Error | None:
    """Why a JoinGroup must be refused for the memory it would hold (None: it fits).
    ``request`` is the joining member as asked; ``held_bytes()`` what every group of
    the coordinator holds."""
    need = request.footprint_bytes()
    if not request.member_id:  # the id it is about to get: "<prefix>-<uuid4>"
        need += len(request.group_instance_id or request.client_id or "member") + NEW_ID_BYTES
    if need > config.max_member_metadata_bytes:
        return (ErrorCode.INVALID_REQUEST,
                f"the member's protocols and ids take {need} bytes, more than "
                f"group_max_member_metadata_bytes {config.max_member_metadata_bytes}")
    known = group.members.get(request.member_id) if request.member_id else None
    if known is None and request.group_instance_id is not None:
        known = group.members.get(group.static_members.get(request.group_instance_id, ""))
    added = need - (known.footprint_bytes() - len(known.assignment) if known else 0)
    if added <= 0:
        return None
    if group.footprint_bytes + added > config.max_metadata_bytes:
        return (ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"group {group.group_id!r} holds {group.footprint_bytes} bytes of member "
                f"metadata; {added} more would pass group_max_metadata_bytes "
                f"{config.max_metadata_bytes}")
    held = held_bytes()
    if held + added > config.coordinator_max_metadata_bytes:
        return (ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"this coordinator's groups hold {held} bytes of member metadata; {added} "
                "more would pass group_coordinator_max_metadata_bytes "
                f"{config.coordinator_max_metadata_bytes}")
    return None


def assignments_too_large(config: GroupCoordinatorConfig, group: Group,
                          assignments: dict[str, bytes], held_bytes: Callable[[], int]) -> int:
    """The bytes ``assignments`` would add to ``group`` if that passes the group's or the
    coordinator's bound; 0 when they fit."""
    added = (sum(map(len, assignments.values()))
             - sum(len(m.assignment) for m in group.members.values()))
    if added > 0 and (group.footprint_bytes + added > config.max_metadata_bytes
                      or held_bytes() + added > config.coordinator_max_metadata_bytes):
        return added
    return 0
