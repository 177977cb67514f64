"""Leader elections of :class:`~clients.admin.Admin`: ElectLeaders.

Contract: ``elect_leaders`` sends one ElectLeaders to any broker (brokers forward it to
the controller, which decides) with the election type (``"preferred"`` or
``"unclean"``) and the partitions (None: every partition; the answer then holds only
the partitions where something was elected or failed).  It returns ``{partition: None
or error}``; ELECTION_NOT_NEEDED is an error value like the others (Kafka's
ElectLeadersResult too) and per-partition errors follow
:func:`~clients.admin.requests.raise_first`; an error of the whole request (no right to
Alter the cluster, v1+) is raised.

Costs: one round trip.  Thread-safety: none (one caller thread, as the Admin).
"""

from __future__ import annotations

from collections.abc import Iterable

from clients.admin.requests import AdminRequests, raise_first
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError, error_for
from clients.protocol.message_types import ElectLeadersRequest, ElectLeadersResponse
from clients.protocol.topics import TopicPartition

__all__ = ["ELECTION_TYPES", "ElectionAdmin"]

ELECTION_TYPES = {"preferred": 0, "unclean": 1}


class ElectionAdmin:
    """ElectLeaders."""

    def __init__(self, requests: AdminRequests) -> None:
        self._requests = requests

    def elect_leaders(self, election_type: str,
                      partitions: Iterable[TopicPartition] | None, *,
                      timeout_ms: int | None = None, raise_on_error: bool = True
                      ) -> dict[TopicPartition, MiniKafkaError | None]:
        if election_type not in ELECTION_TYPES:
            raise ValueError(f"election type {election_type!r} is not one of "
                             f"{', '.join(ELECTION_TYPES)}")
        timeout = self._requests.timeout(timeout_ms)
        by_topic: dict[str, list[int]] | None = None
        if partitions is not None:
            by_topic = {}
            for tp in dict.fromkeys(TopicPartition(*tp) for tp in partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
        request: ElectLeadersRequest = {
            "election_type": ELECTION_TYPES[election_type], "timeout_ms": timeout,
            "topic_partitions": None if by_topic is None else [
                {"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        body = self._requests.request(None, ApiKey.ELECT_LEADERS, request, timeout,
                                      ElectLeadersResponse)
        if body["error_code"]:
            raise error_for(body["error_code"], "elect leaders")
        out: dict[TopicPartition, MiniKafkaError | None] = {}
        for t in body["replica_election_results"]:
            for p in t["partition_result"]:
                tp = TopicPartition(t["topic"], p["partition_id"])
                out[tp] = (error_for(p["error_code"], p["error_message"] or f"elect {tp}")
                           if p["error_code"] else None)
        return raise_first(out, raise_on_error)
