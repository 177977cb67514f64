"""A broker's dynamic configs: the broker settings an operator changes at run time with
IncrementalAlterConfigs / AlterConfigs on a broker resource (``configs --alter
--entity-type brokers --entity-name N``, Kafka's ``kafka-configs.sh``), without a restart.

Which configs (:data:`DYNAMIC_BROKER_CONFIGS`, Kafka's names; ours with ``_`` accepted):

| name                                  | type        | effect                           |
|---------------------------------------|-------------|----------------------------------|
| ``follower.replication.throttled.rate`` | long >= 0 | bytes/s this broker fetches for  |
|                                       | (0 = off)   | replicas outside their ISR       |
|                                       |             | (:mod:`replication.throttle`)    |

Errors are Kafka's for a broker resource: INVALID_REQUEST "Cannot update these configs
dynamically: Set(x)" for any other broker config (they are static: the config file or
``--override``), INVALID_REQUEST "Invalid value ..." for a bad value.  Kafka's
``leader.replication.throttled.rate`` is refused with INVALID_REQUEST too: we have no
leader-side throttle.

Contract: :class:`DynamicBrokerConfigs` holds this broker's overrides (Kafka's
DYNAMIC_BROKER_CONFIG source) over the static :class:`~broker.config.BrokerConfig`
values; :meth:`~DynamicBrokerConfigs.alter` checks a request's new set of overrides
(:func:`new_overrides`, which applies AlterConfigs' replace-all or IncrementalAlterConfigs'
SET/DELETE; APPEND/SUBTRACT are INVALID_CONFIG, no list config is dynamic), writes them to
``<data_dir>/dynamic_broker_configs.json`` (temp file, fsync, rename) and then calls every
listener (:meth:`~DynamicBrokerConfigs.listen`; the replica fetchers' throttle takes the
new rate).  The file is read at construction, so overrides survive a restart; an
unreadable file or a bad entry is logged and skipped (the static value holds).

Not done yet: Kafka's cluster-wide dynamic defaults (resource name ``""``,
DYNAMIC_DEFAULT_BROKER_CONFIG, stored in the metadata log); each broker keeps its own
overrides, so a cluster-wide change is one alteration per broker.

Costs: O(configs) per alteration plus one small file write.  Thread-safety: none; the
broker's event loop.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from broker.config import BrokerConfig
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError

log = logging.getLogger(__name__)

FILE_NAME = "dynamic_broker_configs.json"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
# Kafka's name -> the BrokerConfig field holding its static value
DYNAMIC_BROKER_CONFIGS: dict[str, str] = {
    FOLLOWER_THROTTLED_RATE: "follower_replication_throttled_rate",
}
MAX_LONG = (1 << 63) - 1
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' operations


def dynamic_name(name: str) -> str:
    """Kafka's dotted spelling of a config name given either way."""
    return name.strip().replace("_", ".")


def _invalid(message: str) -> MiniKafkaError:
    return MiniKafkaError(message, ErrorCode.INVALID_REQUEST)


def check_value(name: str, value: str) -> str:
    """The value as stored (an integer in its plain form), or INVALID_REQUEST in Kafka's
    words."""
    try:
        number = int(value.strip())
    except ValueError:
        raise _invalid(f"Invalid value {value} for configuration {name}: Not a number of "
                       "type LONG") from None
    if not 0 <= number <= MAX_LONG:
        bound = "at least 0" if number < 0 else f"at most {MAX_LONG}"
        raise _invalid(f"Invalid value {value} for configuration {name}: Value must be "
                       f"{bound}")
    return str(number)


def _check_name(given: str) -> str:
    name = dynamic_name(given)
    if name == LEADER_THROTTLED_RATE:
        raise _invalid(f"{name} is not supported by minikafka (there is no leader-side "
                       f"replication throttle; {FOLLOWER_THROTTLED_RATE} is)")
    if name not in DYNAMIC_BROKER_CONFIGS:
        raise _invalid(f"Cannot update these configs dynamically: Set({given.strip()}) "
                       f"(minikafka's dynamic broker configs: "
                       f"{', '.join(sorted(DYNAMIC_BROKER_CONFIGS))})")
    return name


def new_overrides(current: Mapping[str, str], configs: Sequence[tuple[str, int, str | None]],
                  incremental: bool) -> dict[str, str]:
    """The overrides after a request's ``(name, operation, value)`` triples (AlterConfigs:
    operation SET for each, and the set replaces ``current`` whole).  INVALID_REQUEST for a
    name given twice, an unknown operation, a null value to set, a name that is not
    dynamic or a bad value; INVALID_CONFIG for APPEND/SUBTRACT."""
    names = [dynamic_name(n) for n, _, _ in configs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise MiniKafkaError(f"config {', '.join(twice)} is named twice",
                             ErrorCode.INVALID_REQUEST)
    out = dict(current) if incremental else {}
    for given, op, value in configs:
        name = _check_name(given)
        if op == DELETE:
            out.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            raise InvalidConfigError(f"Config value {'append' if op == APPEND else 'subtract'}"
                                     f" is not allowed for config key: {name}")
        elif op != SET:
            raise MiniKafkaError(f"config {name}: unknown operation {op}",
                                 ErrorCode.INVALID_REQUEST)
        elif value is None:
            raise MiniKafkaError(f"config {name}: a null value is not supported",
                                 ErrorCode.INVALID_REQUEST)
        else:
            out[name] = check_value(name, value)
    return out


class DynamicBrokerConfigs:
    """This broker's dynamic overrides, persisted, with change listeners."""

    def __init__(self, config: BrokerConfig, data_dir: Path) -> None:
        self.config = config
        self.path = data_dir / FILE_NAME
        self.overrides: dict[str, str] = self._read()
        self._listeners: list[Callable[[], None]] = []

    def _read(self) -> dict[str, str]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): the static broker configs hold", self.path, exc)
            return {}
        configs = raw.get("configs") if isinstance(raw, dict) else None
        out: dict[str, str] = {}
        for name, value in (configs.items() if isinstance(configs, dict) else ()):
            try:
                out[_check_name(str(name))] = check_value(str(name), str(value))
            except MiniKafkaError as exc:
                log.error("%s: skipped %s=%r: %s", self.path, name, value, exc.message)
        return out

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every change of the overrides."""
        self._listeners.append(listener)

    def static_value(self, name: str) -> str:
        return str(getattr(self.config, DYNAMIC_BROKER_CONFIGS[name]))

    def value(self, name: str) -> str:
        """The value in effect: the override, else the static one."""
        return self.overrides.get(name, self.static_value(name))

    @property
    def follower_replication_throttled_rate(self) -> int:
        return int(self.value(FOLLOWER_THROTTLED_RATE))

    def alter(self, overrides: Mapping[str, str]) -> None:
        """Take ``overrides`` (checked by :func:`new_overrides`) as the whole new set,
        write them, then tell the listeners."""
        new = dict(sorted(overrides.items()))
        if new == self.overrides:
            return
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "configs": new}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.overrides = new
        log.info("dynamic broker configs now %s", new or "none (static values)")
        for listener in self._listeners:
            listener()
