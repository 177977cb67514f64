"""The users file (:mod:`broker.users`) and a SASL session that logs users in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.auth import SaslSession, needs_login
from broker.users import ScramUsers, add_user
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, InvalidConfigError
from clients.protocol.scram import ScramClient, plain_token


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def log_in(session: SaslSession, mechanism: str, user: str, password: bytes) -> int:
    assert session.handshake({"mechanism": mechanism}, 1)["error_code"] == 0
    client = ScramClient(mechanism, user, password)
    first = session.authenticate({"auth_bytes": client.first()})
    if first["error_code"]:
        return int(first["error_code"])
    final = session.authenticate({"auth_bytes": client.final(first["auth_bytes"])})
    if final["error_code"] == 0:
        client.verify(final["auth_bytes"])
    return int(final["error_code"])


def test_a_user_logs_in_with_either_mechanism_and_the_file_holds_no_password(
        tmp_path: Path) -> None:
    path = tmp_path / "users.scram"
    add_user(path, "alice", b"s3cret-password")
    assert path.stat().st_mode & 0o777 == 0o600
    assert b"s3cret" not in path.read_bytes()
    users = ScramUsers(str(path))
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        session = SaslSession("", users)
        assert log_in(session, mechanism, "alice", b"s3cret-password") == 0
        assert session.principal == "alice"
    session = SaslSession("", users)
    assert log_in(session, "SCRAM-SHA-256", "alice", b"wrong") == \
        ErrorCode.SASL_AUTHENTICATION_FAILED and session.principal is None
    assert log_in(SaslSession("", users), "SCRAM-SHA-256", "mallory", b"x") == \
        ErrorCode.SASL_AUTHENTICATION_FAILED
    # a user file cannot make anyone a broker: broker-N logins need the cluster secret
    assert log_in(SaslSession("", users), "SCRAM-SHA-256", "broker-0", b"x") == \
        ErrorCode.SASL_AUTHENTICATION_FAILED


def test_the_file_is_reread_when_it_changes_and_a_damaged_one_keeps_the_users(
        tmp_path: Path) -> None:
    path, clock = tmp_path / "users.scram", Clock()
    add_user(path, "alice", b"first-password")
    users = ScramUsers(str(path), clock)
    assert users.credential("SCRAM-SHA-256", "bob") is None
    add_user(path, "bob", b"second-password")
    clock.now += 2  # checked at most once a second
    assert users.credential("SCRAM-SHA-256", "bob") is not None
    path.write_text("garbage line\n")
    os.chmod(path, 0o600)
    clock.now += 2
    assert users.credential("SCRAM-SHA-256", "alice") is not None  # last good users kept


def test_bad_files_names_and_passwords_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "users.scram"
    add_user(path, "alice", b"first-password")
    os.chmod(path, 0o644)
    with pytest.raises(InvalidConfigError, match="readable by others"):
        ScramUsers(str(path))
    for name, password in (("broker-1", b"long-password"), ("", b"long-password"),
                           ("x" * 65, b"long-password"), ("bob", b"short")):
        with pytest.raises(InvalidConfigError):
            add_user(tmp_path / "other.scram", name, password)


def test_before_a_login_only_api_versions_and_sasl_are_served() -> None:
    session = SaslSession("")
    for api in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
        assert not needs_login(True, None, api)
    assert needs_login(True, None, ApiKey.METADATA)
    assert needs_login(True, session, ApiKey.PRODUCE)
    assert not needs_login(False, None, ApiKey.PRODUCE)
    session.principal = "alice"
    assert not needs_login(True, session, ApiKey.PRODUCE)


def test_plain_is_offered_on_tls_ports_only(tmp_path: Path) -> None:
    users = tmp_path / "users.scram"
    add_user(users, "alice", b"right password")
    plaintext = SaslSession("", ScramUsers(str(users)))
    assert "PLAIN" not in plaintext.offered()
    assert plaintext.handshake({"mechanism": "PLAIN"}, 1)["error_code"] == int(
        ErrorCode.UNSUPPORTED_SASL_MECHANISM)
    tls = SaslSession("", ScramUsers(str(users)), plain=True)
    assert tls.handshake({"mechanism": "PLAIN"}, 1)["error_code"] == 0
    refused = tls.authenticate({"auth_bytes": plain_token("alice", b"wrong")})
    assert refused["error_code"] == int(ErrorCode.SASL_AUTHENTICATION_FAILED)
    assert tls.principal is None and tls.failed
    # the exchange is over after a failure (the server closes the connection): no retry
    assert tls.handshake({"mechanism": "PLAIN"}, 1)["error_code"] == int(
        ErrorCode.ILLEGAL_SASL_STATE)
    tls = SaslSession("", ScramUsers(str(users)), plain=True)
    assert tls.handshake({"mechanism": "PLAIN"}, 1)["error_code"] == 0
    assert tls.authenticate({"auth_bytes": plain_token("alice", b"right password")})[
        "error_code"] == 0
    assert tls.principal == "alice" and not tls.failed
