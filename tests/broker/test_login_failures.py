"""Failed logins per name and per address (:mod:`broker.login_failures`), driven by a
manual clock, and a SASL session that counts them (:class:`broker.auth.SaslSession`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from broker.auth import DECOY_KEY_FILE, SaslSession, scram_decoy_key
from broker.config import BrokerConfig
from broker.controller.config import ControllerConfig
from broker.login_failures import LoginFailureLimits, LoginFailures
from broker.users import ScramUsers, add_user
from clients.protocol.errors import ErrorCode, InvalidConfigError
from clients.protocol.scram import ScramClient, broker_password, plain_token
from timer.clock import ManualClock

LIMITS = LoginFailureLimits(max_failed_logins_per_user=3, max_failed_logins_per_address=5,
                            failed_login_window_ms=10_000, failed_login_lockout_ms=30_000,
                            max_failed_login_entries=100)


def tracker(limits: LoginFailureLimits = LIMITS) -> tuple[LoginFailures, ManualClock]:
    clock = ManualClock(1_000)
    return LoginFailures(limits, clock), clock


def test_a_name_is_locked_out_at_its_bound_for_the_lockout_then_counted_afresh(
        caplog: pytest.LogCaptureFixture) -> None:
    failures, clock = tracker()
    for address in ("10.0.0.1", "10.0.0.2"):  # from any address: the name counts
        failures.record("alice", address)
    assert failures.refusal("alice", "10.0.0.3") is None
    with caplog.at_level(logging.WARNING, "broker.login_failures"):
        failures.record("alice", "10.0.0.3")
    assert "3 failed logins for user 'alice'" in caplog.text
    assert "max_failed_logins_per_user=3" in caplog.text
    refusal = failures.refusal("alice", "10.0.0.9")
    assert refusal is not None and "user 'alice'" in refusal
    assert failures.refusal("bob", "10.0.0.9") is None  # other names and addresses: not
    failures.record("alice", "10.0.0.9")  # refused meanwhile: not counted
    clock.advance(29_999)
    assert failures.refusal("alice", "10.0.0.9") is not None
    clock.advance(1)
    assert failures.refusal("alice", "10.0.0.9") is None  # the lockout ends on time
    failures.record("alice", "10.0.0.4")
    failures.record("alice", "10.0.0.5")
    assert failures.refusal("alice", "10.0.0.9") is None  # a new count: 2 of 3


def test_failures_older_than_the_window_do_not_add_up() -> None:
    failures, clock = tracker()
    for _ in range(2):
        failures.record("alice", "10.0.0.1")
    clock.advance(10_000)  # the window (from the first failure) is over
    failures.record("alice", "10.0.0.2")
    failures.record("alice", "10.0.0.3")
    assert failures.refusal("alice", "10.0.0.4") is None
    failures.record("alice", "10.0.0.4")
    assert failures.refusal("alice", "10.0.0.4") is not None


def test_an_address_is_locked_out_for_every_name_and_unnamed_failures_count() -> None:
    failures, _clock = tracker()
    for i in range(4):
        failures.record(f"guess-{i}", "10.0.0.1")  # unknown names count like real ones
    failures.record(None, "10.0.0.1")  # a malformed exchange: the address only
    refusal = failures.refusal("bob", "10.0.0.1")
    assert refusal is not None and "address 10.0.0.1" in refusal
    assert failures.refusal(None, "10.0.0.1") is not None
    assert failures.refusal("bob", "10.0.0.2") is None


def test_the_tables_are_bounded_and_forget_expired_entries_first() -> None:
    limits = LoginFailureLimits(max_failed_logins_per_user=3,
                                max_failed_logins_per_address=1_000,
                                failed_login_window_ms=10_000, failed_login_lockout_ms=5_000,
                                max_failed_login_entries=4)
    failures, clock = tracker(limits)
    for _ in range(3):
        failures.record("alice", "10.0.0.1")
    assert failures.refusal("alice", "10.0.0.2") is not None
    for i in range(3):  # the table is full now
        failures.record(f"name-{i}", "10.0.0.1")
    assert len(failures.users.entries) == 4
    failures.record("one-more", "10.0.0.1")  # the oldest (alice) is forgotten
    assert len(failures.users.entries) == 4 and "alice" not in failures.users.entries
    clock.advance(10_000)
    failures.record("late", "10.0.0.1")  # everything else expired: forgotten
    assert list(failures.users.entries) == ["late"]
    # a long name is kept under its digest: an entry stays small
    failures.record("x" * 100_000, "10.0.0.1")
    assert max(len(k) for k in failures.users.entries) <= 71


def test_shared_addresses_count_per_user_only() -> None:
    """127.0.0.1 (every local client) is never locked out as an address: one local client
    retrying a wrong password must not lock every local application out; its user still
    is, at the per-user bound."""
    failures, _clock = tracker()
    for i in range(20):
        failures.record(f"guess-{i}", "127.0.0.1")
        failures.record(f"guess-{i}", "::1")
    assert failures.refusal("bob", "127.0.0.1") is None
    assert failures.refusal("bob", "::1") is None
    for _ in range(3):
        failures.record("alice", "127.0.0.1")
    refusal = failures.refusal("alice", "127.0.0.1")
    assert refusal is not None and "user 'alice'" in refusal
    nat, _clock = tracker(LoginFailureLimits(max_failed_logins_per_address=2,
                                             failed_login_shared_addresses="10.0.0.9"))
    for i in range(5):
        nat.record(f"guess-{i}", "10.0.0.9")
        nat.record(f"guess-{i}", "127.0.0.1")
    assert nat.refusal("bob", "10.0.0.9") is None
    assert nat.refusal("bob", "127.0.0.1") is not None  # not shared in that setting


def test_limits_are_validated_in_both_configs() -> None:
    assert LoginFailureLimits.of(BrokerConfig()) == LoginFailureLimits.of(ControllerConfig())
    for key, value in (("max_failed_logins_per_user", 0), ("failed_login_window_ms", -1),
                       ("max_failed_login_entries", 0),
                       ("max_delayed_authentication_failures", 0),
                       ("connection_failed_authentication_delay_ms", -1),
                       ("connection_failed_authentication_delay_ms", 600_000),
                       ("failed_login_shared_addresses", "127.0.0.1,nat-box")):
        for config in (BrokerConfig(), ControllerConfig()):
            with pytest.raises(InvalidConfigError, match=key):
                config.with_overrides({key: value})
    assert BrokerConfig().with_overrides(
        {"connection_failed_authentication_delay_ms": 0}).validate()  # Kafka allows 0


# ---------------------------------------------------------------- sessions


def log_in(session: SaslSession, user: str, password: bytes) -> int:
    assert session.handshake({"mechanism": "SCRAM-SHA-256"}, 1)["error_code"] == 0
    client = ScramClient("SCRAM-SHA-256", user, password)
    first = session.authenticate({"auth_bytes": client.first()})
    if first["error_code"]:
        return int(first["error_code"])
    return int(session.authenticate(
        {"auth_bytes": client.final(first["auth_bytes"])})["error_code"])


FAILED = ErrorCode.SASL_AUTHENTICATION_FAILED


def test_a_session_counts_its_failure_and_a_lockout_refuses_the_right_password(
        tmp_path: Path) -> None:
    path = tmp_path / "users.scram"
    add_user(path, "alice", b"right password")
    users = ScramUsers(str(path))
    failures, clock = tracker()

    def session(address: str, plain: bool = False) -> SaslSession:
        return SaslSession("s" * 64, users, plain, failures=failures, address=address)

    wrong = session("10.0.0.1")
    assert log_in(wrong, "alice", b"wrong") == FAILED and wrong.failed
    assert wrong.handshake({"mechanism": "SCRAM-SHA-256"}, 1)["error_code"] == \
        ErrorCode.ILLEGAL_SASL_STATE  # the exchange is over: no second try
    assert log_in(session("10.0.0.2"), "alice", b"wrong") == FAILED
    tls = session("10.0.0.3", plain=True)
    assert tls.handshake({"mechanism": "PLAIN"}, 1)["error_code"] == 0
    assert tls.authenticate({"auth_bytes": plain_token("alice", b"wrong")})[
        "error_code"] == FAILED  # PLAIN failures count too: alice is locked out now
    locked = session("10.0.0.4")
    assert log_in(locked, "alice", b"right password") == FAILED and locked.locked_out
    assert locked.principal is None
    # brokers' names are neither counted nor refused: a broker logs in from anywhere
    for _ in range(10):
        assert log_in(session("10.0.0.5"), "broker-1", b"guess") == FAILED
    assert failures.refusal(None, "10.0.0.5") is None
    for i in range(5):
        assert log_in(session("10.0.0.6"), f"guess-{i}", b"x") == FAILED
    assert log_in(session("10.0.0.6"), "bob", b"x") == FAILED  # the address is locked
    assert log_in(session("10.0.0.6"), "broker-1", broker_password("s" * 64, 1)) == 0
    clock.advance(30_000)
    assert log_in(session("10.0.0.6"), "alice", b"right password") == 0


def test_the_decoy_key_comes_from_the_secret_or_is_kept_in_the_data_dir(
        tmp_path: Path) -> None:
    assert scram_decoy_key("s" * 64, tmp_path) == scram_decoy_key("s" * 64, None)
    assert scram_decoy_key("s" * 64, None) != scram_decoy_key("t" * 64, None)
    assert not (tmp_path / DECOY_KEY_FILE).exists()  # a secret needs no file
    key = scram_decoy_key("", tmp_path)  # no secret: made once, kept across restarts
    assert (tmp_path / DECOY_KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert scram_decoy_key("", tmp_path) == key and len(key) == 32
    os.chmod(tmp_path / DECOY_KEY_FILE, 0o600)
    (tmp_path / DECOY_KEY_FILE).write_text("not hex\n")
    with pytest.raises(InvalidConfigError, match=DECOY_KEY_FILE):
        scram_decoy_key("", tmp_path)
