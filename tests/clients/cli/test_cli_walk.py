"""What a Kafka user following README.md and docs/cli.md tripped over (no processes).

Each test pins one finding of that walk: the argument that was read wrong, the message
that printed a Python repr where Kafka's tools print a name.
"""

from __future__ import annotations

from typing import Any

import pytest

from clients.admin.offsets import EARLIEST, LATEST
from clients.cli.admin_tools.reset_offsets import plan
from clients.cli.common import CliError, client_properties
from clients.cli.main import build_parser
from clients.protocol.errors import error_for
from clients.protocol.topics import TopicPartition
from clients.types import ConfigResource, ConfigResourceType, OffsetAndMetadata, OffsetAndTimestamp

T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


class OffsetsAdmin:
    """The two Admin calls ``plan`` makes, over fixed offsets: log start 2, high
    watermark 10 on both partitions, committed 5 on partition 0."""

    def list_group_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return {T0: OffsetAndMetadata(5)}

    def list_offsets(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
        found = {EARLIEST: 2, LATEST: 10}
        return {tp: OffsetAndTimestamp(found[spec], -1) for tp, spec in specs.items()}


def reset_args(*target: str) -> Any:
    return build_parser().parse_args(
        ["groups", "reset-offsets", "billing", "--topic", "orders:0,1", *target])


@pytest.mark.parametrize(("target", "expected"), [
    (("--to-offset", "0"), {T0: 2, T1: 2}),     # clamped up to the log start
    (("--shift-by", "0"), {T0: 5, T1: 2}),      # no commit: from the log start
    (("--to-offset", "7"), {T0: 7, T1: 7}),
])
def test_a_zero_reset_target_is_a_target(target: tuple[str, ...],
                                          expected: dict[TopicPartition, int]) -> None:
    # `--to-offset 0` was taken for "no target given" (0 in (None, False) is True)
    assert plan(OffsetsAdmin(), "billing", reset_args(*target)) == expected


def test_no_reset_target_is_still_refused() -> None:
    with pytest.raises(CliError, match="exactly one of"):
        plan(OffsetsAdmin(), "billing", reset_args())
    with pytest.raises(CliError, match="exactly one of"):
        plan(OffsetsAdmin(), "billing", reset_args("--to-offset", "0", "--to-earliest"))


def test_messages_name_partitions_and_config_resources_as_kafka_does() -> None:
    # delete-records printed "delete records of TopicPartition(topic='orders', partition=9)"
    assert str(T1) == "orders-1" and f"{TopicPartition('a-b', 12)}" == "a-b-12"
    assert str(error_for(3, f"delete records of {TopicPartition('orders', 9)}")) == \
        "UNKNOWN_TOPIC_OR_PARTITION: delete records of orders-9"
    # configs --alter printed "ConfigResource(type=<ConfigResourceType.TOPIC: 2>, ...)"
    assert str(ConfigResource(ConfigResourceType.TOPIC, "orders")) == "topic 'orders'"
    assert str(ConfigResource(ConfigResourceType.BROKER, "0")) == "broker '0'"
    assert T1 == ("orders", 1) and repr(T1) == "TopicPartition(topic='orders', partition=1)"


def test_an_unknown_client_property_is_named_as_typed() -> None:
    # was "Consumer.__init__() got an unexpected keyword argument 'no_such_prop'"
    from clients.consumer.consumer import Consumer
    from clients.producer.producer import Producer

    with pytest.raises(CliError) as caught:
        client_properties(["fetch.max.wait.ms=100", "no.such.prop=1"], "--consumer-property",
                          Consumer)
    assert str(caught.value) == "--consumer-property: unknown Consumer setting 'no.such.prop'"
    assert client_properties(["linger.ms=5", "enable_idempotence=false"],
                             "--producer-property", Producer) == \
        {"linger_ms": 5, "enable_idempotence": False}


SPARK_FAILURE = """\
[PYTHON_DATA_SOURCE_ERROR] Failed to generate Python data source read partitions: \
Traceback (most recent call last):
  File "/src/clients/spark/source.py", line 198, in partitions
    planner.close()
  File "/src/clients/network/node_connections.py", line 98, in least_loaded
    raise NetworkError("no broker reachable: " + "; ".join(errors))
clients.network.connection.NetworkError: NETWORK_EXCEPTION: no broker reachable: \
cannot connect to node -1 at 127.0.0.1:9092: [Errno 111] Connection refused
 SQLSTATE: 38000

JVM stacktrace:
org.apache.spark.SparkException: Job aborted
\tat org.apache.spark.Foo.bar(Foo.scala:1)
"""


def test_a_failed_spark_job_is_reported_by_its_cause() -> None:
    # `verify` on a stopped cluster said "... Traceback (most recent call last): |
    # File ".../source.py", line 198, in partitions | planner.close()"
    from clients.spark.verify.session import failure_message

    assert failure_message(SPARK_FAILURE) == (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to generate Python data source read partitions: "
        "NETWORK_EXCEPTION: no broker reachable: cannot connect to node -1 at "
        "127.0.0.1:9092: [Errno 111] Connection refused")
    assert failure_message("[X] boom\nsecond\nthird\nfourth") == "[X] boom | second | third"


def test_group_states_are_kafkas_any_case_and_a_typo_is_an_error() -> None:
    # `groups --list --state Bogus` listed nothing and exited 0
    from clients.cli.groups import parse_states

    assert parse_states("stable, EMPTY") == ["Stable", "Empty"]
    with pytest.raises(CliError, match="'Bogus' is not a group state"):
        parse_states("Stable,Bogus")
