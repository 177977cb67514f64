"""Our extensions of Kafka's messages: tagged fields with tags from 1000 up.

Kafka's flexible versions (KIP-482) let a message carry tagged fields that a reader who
does not know the tag skips; every Kafka client does.  We use that to carry what our own
broker, controller and client exchange beyond Kafka's fields, without changing a byte a
Kafka client reads.  Each tag has one meaning everywhere it appears and is never reused.
They exist only in flexible versions.

| tag  | name               | where                              | who sets / reads it          |
|------|--------------------|------------------------------------|------------------------------|
| 1000 | fenced             | Metadata response brokers[]        | controller / broker          |
| 1001 | unclean_elected    | Metadata response partitions[]     | controller / broker          |
| 1002 | configs            | Metadata response topics[]         | broker / our client          |
| 1003 | log_start_offset   | DescribeLogDirs partitions[]       | broker / `cluster status`    |
| 1004 | log_end_offset     | DescribeLogDirs partitions[]       | broker / `cluster status`    |
| 1005 | high_watermark     | DescribeLogDirs partitions[]       | broker / `cluster status`    |
| 1006 | leader_id          | DescribeLogDirs partitions[]       | broker / `cluster status`    |
| 1007 | leader_epoch       | DescribeLogDirs partitions[]       | broker / `cluster status`    |
| 1008 | isr                | DescribeLogDirs partitions[]       | broker / `cluster status`    |
| 1009 | replica_logs       | BrokerRegistration request         | broker / controller          |
| 1010 | report_replica_logs| BrokerHeartbeat response           | controller / broker          |
| 1011 | offline_reason     | Metadata response partitions[]     | controller / `cluster status`|
| 1012 | damaged_from       | DescribeLogDirs partitions[]       | broker / `cluster status`    |
| 1013 | recovery_cut       | DescribeLogDirs partitions[]       | broker / `cluster status`    |
| 1100 | error_message      | group, controller and              | coordinator, controller,     |
|      |                    | InitProducerId responses           | broker / us                  |

Costs: none (constants).  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.schema import STRING, Field

TAG_FENCED = 1000
TAG_UNCLEAN_ELECTED = 1001
TAG_CONFIGS = 1002
TAG_LOG_START_OFFSET = 1003
TAG_LOG_END_OFFSET = 1004
TAG_HIGH_WATERMARK = 1005
TAG_LEADER_ID = 1006
TAG_LEADER_EPOCH = 1007
TAG_ISR = 1008
TAG_REPLICA_LOGS = 1009
TAG_REPORT_REPLICA_LOGS = 1010
TAG_OFFLINE_REASON = 1011
TAG_DAMAGED_FROM = 1012
TAG_RECOVERY_CUT = 1013
TAG_ERROR_MESSAGE = 1100


def error_message_field(flexible: str) -> Field:
    """The error's text next to Kafka's error code, in the given (flexible) versions."""
    return Field("error_message", STRING, flexible, nullable=flexible, tag=TAG_ERROR_MESSAGE,
                 tagged=flexible, default=None)
