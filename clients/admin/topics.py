"""Topic operations of :class:`~clients.admin.Admin`: create and delete topics, add
partitions, list and describe topics.

Contract: CreateTopics (configs as ``[{name, value}]``), DeleteTopics and
CreatePartitions go to the controller (:meth:`~clients.admin.requests.AdminRequests.to_controller`:
any broker if the controller is not a known broker; the broker forwards or answers
NOT_CONTROLLER, which is retried once after a metadata refresh); arguments are checked
before anything is sent (ValueError / TypeError), except a topic's partition count and
replication factor, which the broker judges (INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR, with Kafka's messages), as Kafka's AdminClient leaves them.
``list_topics`` and ``describe_topics`` use Metadata without auto-creation; a description
carries the topic's id (Kafka's base64 form, None when the broker has none: a standalone
broker, or a version below 10; ``list_topic_ids`` lists them by name).  DeleteTopics
names topics by name (every version) or, with ``delete_topics_by_id``, by id (v6, else
UNSUPPORTED_VERSION).  Per-topic failures follow
:func:`~clients.admin.requests.raise_first` (``{topic: error or None}``).

Costs: one round trip per call (plus a metadata refresh before the first controller
request).  Thread-safety: none (one caller thread, as the Admin).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from clients.admin.configs import check_config_pair
from clients.admin.requests import AdminRequests, raise_first
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from clients.protocol.message_types import (
    CreatePartitionsRequest,
    CreatePartitionsRequestAssignment,
    CreatePartitionsRequestTopic,
    CreatePartitionsResponse,
    CreatePartitionsResponseResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    CreateTopicsResponseTopic,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicsResponseResponse,
)
from clients.protocol.topics import ZERO_UUID, parse_topic_id, topic_id_str, validate_topic_name
from clients.types import NewPartitions, NewTopic, PartitionInfo, TopicDescription


class TopicAdmin:
    """CreateTopics, DeleteTopics, CreatePartitions and Metadata for topics."""

    def __init__(self, requests: AdminRequests) -> None:
        self._requests = requests

    def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        topics = list(new_topics)
        for t in topics:
            validate_topic_name(t.name)
            # a partition count or replication factor below 1 (but -1, the default) is
            # the broker's to refuse: INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR
            if t.replica_assignments and (t.num_partitions != -1
                                          or t.replication_factor != -1):
                raise ValueError(f"{t.name}: with replica_assignments, num_partitions "
                                 "and replication_factor must be -1")
            for name, value in (t.configs or {}).items():
                check_config_pair(t.name, name, value)
        timeout = self._requests.timeout(timeout_ms)
        body: CreateTopicsRequest = {
            "topics": [
                {"name": t.name, "num_partitions": t.num_partitions,
                 "replication_factor": t.replication_factor,
                 "assignments": [{"partition_index": p, "broker_ids": list(ids)}
                                 for p, ids in sorted((t.replica_assignments or {}).items())],
                 "configs": [{"name": k, "value": v} for k, v in (t.configs or {}).items()]}
                for t in topics
            ],
            "timeout_ms": timeout,
            "validate_only": validate_only,
        }  # fmt: skip
        response = self._requests.to_controller(ApiKey.CREATE_TOPICS, body, timeout, "topics",
                                                CreateTopicsResponse)
        return self._results(response["topics"], "create topic", raise_on_error)

    def delete_topics(
        self,
        names: Iterable[str],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        topic_names = [validate_topic_name(n) for n in names]
        timeout = self._requests.timeout(timeout_ms)
        # topic_names up to v5, topics from v6: the codec writes the one of the version
        body: DeleteTopicsRequest = {"topic_names": topic_names, "timeout_ms": timeout,
                                     "topics": [{"name": n} for n in topic_names]}
        response = self._requests.to_controller(ApiKey.DELETE_TOPICS, body, timeout, "responses",
                                                DeleteTopicsResponse)
        return self._results(response["responses"], "delete topic", raise_on_error)

    def delete_topics_by_id(
        self,
        topic_ids: Iterable[str],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        """Delete topics given by id (Kafka's base64 form); the result is keyed by id."""
        ids = {text: parse_topic_id(text) for text in topic_ids}
        timeout = self._requests.timeout(timeout_ms)
        # below v6 the request carries no topic (topic_names is empty): nothing is deleted
        body: DeleteTopicsRequest = {"topics": [{"name": None, "topic_id": i}
                                                for i in ids.values()],
                                     "topic_names": [], "timeout_ms": timeout}
        response = self._requests.to_controller(ApiKey.DELETE_TOPICS, body, timeout, "responses",
                                                DeleteTopicsResponse)
        out: dict[str, MiniKafkaError | None] = {
            text: error_for(ErrorCode.UNSUPPORTED_VERSION, "the broker does not delete "
                            "topics by id (DeleteTopics v6)") for text in ids}
        for r in response["responses"]:
            text, code = topic_id_str(r.get("topic_id", ZERO_UUID)), r["error_code"]
            if text in out:
                out[text] = None if code == ErrorCode.NONE else error_for(
                    code, f"delete topic id {text}: {r['error_message'] or ''}".rstrip(": "))
        return raise_first(out, raise_on_error)

    def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions | int],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        raise_on_error: bool = True,
    ) -> dict[str, MiniKafkaError | None]:
        topics: list[CreatePartitionsRequestTopic] = []
        for name, spec in new_partitions.items():
            validate_topic_name(name)
            np_ = NewPartitions(spec) if isinstance(spec, int) else NewPartitions(*spec)
            if not isinstance(np_.total_count, int) or np_.total_count <= 0:
                raise ValueError(f"{name}: total_count must be an int > 0, got "
                                 f"{np_.total_count!r}")
            assignments: list[CreatePartitionsRequestAssignment] | None = (
                None if np_.new_assignments is None else [
                    {"broker_ids": [int(b) for b in ids]} for ids in np_.new_assignments])
            topics.append({"name": name, "count": np_.total_count, "assignments": assignments})
        timeout = self._requests.timeout(timeout_ms)
        body: CreatePartitionsRequest = {"topics": topics, "timeout_ms": timeout,
                                         "validate_only": validate_only}
        response = self._requests.to_controller(ApiKey.CREATE_PARTITIONS, body, timeout,
                                                "results", CreatePartitionsResponse)
        return self._results(response["results"], "create partitions of", raise_on_error)

    def list_topics(self, *, timeout_ms: int | None = None) -> list[str]:
        body = self._requests.refresh_metadata(None, self._requests.timeout(timeout_ms),
                                               allow_auto_topic_creation=False)
        # a topic is named in the answer to a request by name (None only when asked by id)
        return sorted(t["name"] for t in body["topics"]
                      if t["error_code"] == 0 and t["name"] is not None)

    def list_topic_ids(self, *, timeout_ms: int | None = None) -> dict[str, str | None]:
        body = self._requests.refresh_metadata(None, self._requests.timeout(timeout_ms),
                                               allow_auto_topic_creation=False)
        return {t["name"]: _topic_id_text(t.get("topic_id", ZERO_UUID))
                for t in sorted(body["topics"], key=lambda t: t["name"] or "")
                if t["error_code"] == 0 and t["name"] is not None}

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, TopicDescription]:
        wanted = None if names is None else [validate_topic_name(n) for n in names]
        body = self._requests.refresh_metadata(wanted, self._requests.timeout(timeout_ms),
                                               allow_auto_topic_creation=False)
        out: dict[str, TopicDescription] = {}
        for t in body["topics"]:
            if t["error_code"] != ErrorCode.NONE:
                raise error_for(t["error_code"], f"describe topic {t['name']!r}")
            name = t["name"]
            if name is None:  # only when asked by id, which this call never does
                continue
            parts = [
                PartitionInfo(name, p["partition_index"], p["leader_id"], p["leader_epoch"],
                              tuple(p["replica_nodes"]), tuple(p["isr_nodes"]),
                              tuple(p["offline_replicas"]), p["error_code"])
                for p in sorted(t["partitions"], key=lambda p: p["partition_index"])
            ]  # fmt: skip
            configs = {c["name"]: c["value"] for c in t["configs"]}
            out[name] = TopicDescription(name, parts, t["is_internal"], configs,
                                         _topic_id_text(t.get("topic_id", ZERO_UUID)))
        return out

    @staticmethod
    def _results(
        results: Sequence[CreateTopicsResponseTopic | DeleteTopicsResponseResponse
                          | CreatePartitionsResponseResult],
        what: str,
        raise_on_error: bool,
    ) -> dict[str, MiniKafkaError | None]:
        out: dict[str, MiniKafkaError | None] = {}
        for r in results:
            code = r["error_code"]
            out[r["name"] or ""] = (
                None
                if code == ErrorCode.NONE
                else error_for(
                    code, f"{what} {r['name']!r}: {r['error_message'] or ''}".rstrip(": ")
                )
            )
        return raise_first(out, raise_on_error)


def _topic_id_text(topic_id: bytes) -> str | None:
    """Kafka's text form of a topic id; None for the zero UUID (the broker has none)."""
    return None if topic_id == ZERO_UUID else topic_id_str(topic_id)
