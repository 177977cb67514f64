"""Workload pieces that need no cluster: values, keys, config checks, progress output."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from clients.cli.main import build_parser
from clients.cli.workload import workload_config
from clients.workload.faults import parse_schedule, random_schedule
from clients.workload.run import (
    WorkloadConfig,
    WorkloadProgress,
    _share,
    decode_value,
    encode_value,
    key_for,
    producer_options,
)


def config(**overrides: object) -> WorkloadConfig:
    base = WorkloadConfig(bootstrap="127.0.0.1:1", topic="t", ledger_path="/nowhere",
                          run_id="abc")
    for name, value in overrides.items():
        setattr(base, name, value)
    return base


def test_values_carry_run_producer_and_sequence() -> None:
    value = encode_value("abc", 7, 123456789012, 64)
    assert len(value) == 64 and value.startswith(b"mk1|abc|7|123456789012|")
    assert decode_value(value) == ("abc", 7, 123456789012)
    assert decode_value(encode_value("abc", 7, 1)) == ("abc", 7, 1)  # no padding
    for bad in (b"", b"mk2|abc|7|1|", b"mk1|a c|7|1|", b"mk1|abc|-7|1|", b"mk1|abc|7|1"):
        assert decode_value(bad) is None
    assert key_for(3, 1) == "p3-k1"


def test_messages_are_split_over_producers() -> None:
    c = config(messages=10, producers=4)
    assert [_share(c, p) for p in range(4)] == [3, 3, 2, 2]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"messages": 0}, "must be >= 1"),
    ({"producers": 300}, "at most 256 producers"),
    ({"rate": -1.0}, "rate must be >= 0"),
    ({"drop_response_ratio": 1.0}, "drop_response_ratio in"),
    ({"faults": parse_schedule("kill:1@1s")}, "needs the cluster's --data-dir"),
])
def test_bad_configs_are_rejected(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(**overrides).check()


def test_producer_options_follow_the_idempotence_switch() -> None:
    default = producer_options(config(), 0)
    assert default["acks"] == "all" and "enable_idempotence" not in default  # default: on
    old = producer_options(config(idempotence=False, drop_response_ratio=0.2), 2)
    assert old["enable_idempotence"] is False
    assert (old["debug_drop_response_ratio"], old["debug_drop_seed"]) == (0.2, 9)


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_tty_and_lines_otherwise() -> None:
    tty = FakeTty()
    bar = WorkloadProgress(100, tty)
    bar.update(50, 40, 10, 1.0)
    bar.log("fault kill:1@1s")
    bar.update(100, 90, 10, 2.0)
    bar.finish()
    text = tty.getvalue()
    assert "\r\033[K[###############---------------]  50%" in text
    assert "\r\033[Kfault kill:1@1s\n" in text and text.endswith("failed 10    2.0 s\n")
    plain = io.StringIO()
    lines = WorkloadProgress(100, plain)
    for done in range(0, 101, 5):
        lines.update(done, done, 0, 0.0)
    assert "\r" not in plain.getvalue()
    assert len(plain.getvalue().splitlines()) == 11  # one line per 10%


def test_cli_options_become_a_config(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps({"brokers": {"0": {"port": 9100}}}))
    parser = build_parser()
    args = parser.parse_args(["workload", "--data-dir", str(tmp_path), "--messages", "10000",
                              "--rate", "1000", "--random-faults", "3", "--run-id", "r9",
                              "--no-idempotence"])
    c = workload_config(args)
    assert (c.bootstrap, c.run_id, c.idempotence) == ("127.0.0.1:9100", "r9", False)
    assert c.faults == random_schedule(3, 10_000) and c.faults
    assert c.ledger_path == str(tmp_path / "ledger-r9.tsv")
    args = parser.parse_args(["workload", "--faults", "kill-leader@1s"])
    with pytest.raises(ValueError, match="needs --data-dir"):
        workload_config(args)
