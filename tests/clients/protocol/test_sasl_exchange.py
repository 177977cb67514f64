"""The sans-IO SASL exchange driven by hand against a ScramServer: the requests it asks
for, a completed login, and the refusals it turns into AuthenticationError."""

from __future__ import annotations

from typing import Any

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import AuthenticationError, ErrorCode
from clients.protocol.sasl_exchange import sasl_exchange
from clients.protocol.scram import ScramError, ScramServer, make_credential, plain_token

MECHANISM = "SCRAM-SHA-512"


def _run(steps: Any, server: ScramServer, mechanisms: list[str]) -> list[tuple[int, int]]:
    """Answer each request as a broker would; returns the (api_key, version) asked for."""
    asked = []
    request = next(steps)
    while True:
        api_key, version, body = request
        asked.append((api_key, version))
        if api_key == ApiKey.SASL_HANDSHAKE:
            ok = body["mechanism"] in mechanisms
            answer = {"error_code": 0 if ok else ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                      "mechanisms": mechanisms}
        else:
            token = bytes(body["auth_bytes"])
            try:
                reply = server.first(token) if token.startswith(b"n,,") else server.final(token)
                answer = {"error_code": 0, "error_message": None, "auth_bytes": reply}
            except ScramError as exc:
                answer = {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                          "error_message": str(exc), "auth_bytes": b""}
        try:
            request = steps.send(answer)
        except StopIteration:
            return asked


def _server() -> ScramServer:
    return ScramServer(MECHANISM, {"alice": make_credential(MECHANISM, b"secret")}.get)


def test_a_scram_login_is_a_handshake_and_two_authenticate_rounds() -> None:
    server = _server()
    asked = _run(sasl_exchange(MECHANISM, "alice", b"secret", 2), server, [MECHANISM])
    assert asked == [(ApiKey.SASL_HANDSHAKE, 1), (ApiKey.SASL_AUTHENTICATE, 2),
                     (ApiKey.SASL_AUTHENTICATE, 2)]
    assert server.username == "alice"


def test_a_wrong_password_is_refused() -> None:
    with pytest.raises(AuthenticationError, match="login as 'alice' refused") as caught:
        _run(sasl_exchange(MECHANISM, "alice", b"wrong", 2), _server(), [MECHANISM])
    assert caught.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_a_mechanism_the_broker_does_not_take_is_refused_before_any_token() -> None:
    steps = sasl_exchange(MECHANISM, "alice", b"secret", 2)
    with pytest.raises(AuthenticationError, match="does not take") as caught:
        _run(steps, _server(), ["PLAIN"])
    assert caught.value.code == ErrorCode.UNSUPPORTED_SASL_MECHANISM


def test_a_server_final_message_that_does_not_prove_the_password_is_refused() -> None:
    steps = sasl_exchange(MECHANISM, "alice", b"secret", 2)
    next(steps)
    first = steps.send({"error_code": 0, "mechanisms": [MECHANISM]})
    server = _server()
    final = steps.send({"error_code": 0, "error_message": None,
                        "auth_bytes": server.first(bytes(first[2]["auth_bytes"]))})
    server.final(bytes(final[2]["auth_bytes"]))
    with pytest.raises(AuthenticationError, match="login as 'alice':"):
        steps.send({"error_code": 0, "error_message": None, "auth_bytes": b"v=AAAA"})


def test_plain_sends_the_password_in_one_round() -> None:
    steps = sasl_exchange("PLAIN", "alice", b"secret", 1)
    assert next(steps)[0] == ApiKey.SASL_HANDSHAKE
    api_key, version, body = steps.send({"error_code": 0, "mechanisms": ["PLAIN"]})
    assert (api_key, version, body["auth_bytes"]) == (
        ApiKey.SASL_AUTHENTICATE, 1, plain_token("alice", b"secret"))
    with pytest.raises(StopIteration):
        steps.send({"error_code": 0, "error_message": None, "auth_bytes": b""})
