"""Role changes and leader-epoch fencing of one replica, as decisions.

The controller's metadata names, per partition, the leader, its *leader epoch* (a new one
with every new leader) and the *partition epoch* (a new one with every ISR or replica-set
change).  :class:`replication.partition.Partition` asks :func:`leader_change` /
:func:`follower_change` what new metadata means for it, then applies the answer
(Kafka's ``Partition.makeLeader`` / ``makeFollower``):

=================================  =====================  ===============================
metadata, against the replica's    as leader              as follower
=================================  =====================  ===============================
older leader epoch                 STALE: ignored         STALE: ignored
same leader epoch, older           STALE                  STALE
partition epoch
same leader epoch, same            STALE                  UPDATE (nothing to truncate)
partition epoch
same leader epoch, newer           UPDATE: new ISR and    UPDATE: new ISR and replicas
partition epoch                    replicas; follower
                                   progress kept
same leader epoch, but this        STALE: a resigned      --
replica does not lead now          leader waits for a
                                   newer epoch
newer leader epoch                 NEW: open the epoch    NEW: run the truncation
                                   at the LEO, forget     handshake before fetching
                                   follower progress
another leader, same epoch         --                     NEW
=================================  =====================  ===============================

High watermark on a role change: a new leader keeps its HW (not above its LEO), and it
is the floor the HW never goes below while it leads; a follower's HW is cut to its LEO.

Fencing (:func:`fence_leader_epoch`): a request carrying another view of the leader
epoch is refused, an older one with FENCED_LEADER_EPOCH (the sender is behind), a newer
one with UNKNOWN_LEADER_EPOCH (this replica is behind: the sender retries).  ``-1``
means the sender does not say: never fenced.

Pure: no state, no I/O; O(1); thread-safe.
"""

from __future__ import annotations

import enum

from replication.partition_errors import FencedLeaderEpochError, UnknownLeaderEpochError

__all__ = ["RoleChange", "fence_leader_epoch", "follower_change", "leader_change"]


class RoleChange(enum.Enum):
    STALE = "stale"     # older metadata: ignore it
    UPDATE = "update"   # the same leadership: new ISR / partition epoch / replicas
    NEW = "new"         # a new leader or leader epoch


def leader_change(leader_epoch: int, partition_epoch: int, is_leader: bool,
                  new_leader_epoch: int, new_partition_epoch: int) -> RoleChange:
    """What metadata making this replica the leader means (table above)."""
    if new_leader_epoch < leader_epoch or (new_leader_epoch == leader_epoch
                                           and not is_leader):
        return RoleChange.STALE
    if new_leader_epoch == leader_epoch:
        return RoleChange.UPDATE if new_partition_epoch > partition_epoch else RoleChange.STALE
    return RoleChange.NEW


def follower_change(leader_id: int, leader_epoch: int, partition_epoch: int,
                    new_leader_id: int, new_leader_epoch: int,
                    new_partition_epoch: int) -> RoleChange:
    """What metadata making this replica a follower of ``new_leader_id`` means."""
    if new_leader_epoch < leader_epoch or (new_leader_epoch == leader_epoch
                                           and new_partition_epoch < partition_epoch):
        return RoleChange.STALE
    if new_leader_epoch != leader_epoch or new_leader_id != leader_id:
        return RoleChange.NEW
    return RoleChange.UPDATE


def fence_leader_epoch(name: str, request_leader_epoch: int, leader_epoch: int) -> None:
    """Refuse a request on ``name`` carrying another leader epoch (-1 = none)."""
    if request_leader_epoch < 0 or request_leader_epoch == leader_epoch:
        return
    if request_leader_epoch < leader_epoch:
        raise FencedLeaderEpochError(f"{name}: request epoch {request_leader_epoch} is older "
                                     f"than the current leader epoch {leader_epoch}")
    raise UnknownLeaderEpochError(f"{name}: request epoch {request_leader_epoch} is newer "
                                  f"than this replica's {leader_epoch}")
