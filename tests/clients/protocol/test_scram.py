"""SCRAM against RFC 7677's test vector, both sides against each other, and the
failures a server must give without saying which part was wrong."""

from __future__ import annotations

import base64

import pytest

from clients.protocol.scram import (
    DEFAULT_ITERATIONS,
    SALT_BYTES,
    ScramClient,
    ScramError,
    ScramServer,
    broker_credential,
    broker_id_of,
    broker_password,
    controller_id_of,
    controller_username,
    decoy_credential,
    internal_password,
    make_credential,
    parse_plain_token,
    password_matches,
    plain_token,
)

CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_vector_client_side() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", b"pencil", nonce=CLIENT_NONCE)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)
    with pytest.raises(ScramError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


def test_rfc7677_vector_server_side() -> None:
    credential = make_credential("SCRAM-SHA-256", b"pencil", SALT)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce=SERVER_NONCE)
    assert server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == SERVER_FIRST
    assert server.final(CLIENT_FINAL) == SERVER_FINAL
    assert server.username == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_and_unknown_user_fail_alike(mechanism: str) -> None:
    users = {"alice": make_credential(mechanism, b"secret")}
    for name, password in [("alice", b"wrong"), ("mallory", b"secret")]:
        server = ScramServer(mechanism, users.get)
        client = ScramClient(mechanism, name, password)
        final = client.final(server.first(client.first()))
        with pytest.raises(ScramError, match=r"^authentication failed$"):
            server.final(final)
        assert server.username is None
    server = ScramServer(mechanism, users.get)
    client = ScramClient(mechanism, "alice", b"secret")
    client.verify(server.final(client.final(server.first(client.first()))))
    assert server.username == "alice"


def salt_and_iterations(server_first: bytes) -> tuple[bytes, int]:
    attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
    return base64.b64decode(attrs["s"]), int(attrs["i"])


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_an_unknown_name_gets_the_same_answer_every_time_in_a_real_users_form(
        mechanism: str) -> None:
    """Issue 30 item 5: an unknown name's salt was random on every attempt and a real
    user's fixed, so two attempts told which names exist."""
    users = {"alice": make_credential(mechanism, b"secret")}
    key = b"k" * 32

    def answer(name: str, server_key: bytes = key) -> tuple[bytes, int]:
        server = ScramServer(mechanism, users.get, decoy_key=server_key)
        return salt_and_iterations(server.first(ScramClient(mechanism, name, b"x").first()))

    real = answer("alice")
    assert real == answer("alice") and real[1] == DEFAULT_ITERATIONS
    unknown = answer("mallory")
    assert unknown == answer("mallory")  # stable across attempts
    assert len(unknown[0]) == len(real[0]) == SALT_BYTES and unknown[1] == real[1]
    assert unknown != answer("trudy") and unknown[0] != real[0]
    assert answer("mallory", b"o" * 32) != unknown  # another server key, another decoy
    assert decoy_credential(key, mechanism, "mallory").salt == unknown[0]


@pytest.mark.parametrize("message", [b"", b"garbage", b"y,,n=a,r=b", b"n,,n=a", b"\xff\xfe",
                                     b"n,,n=a=b,r=x"])
def test_malformed_first_messages_are_precise_errors(message: bytes) -> None:
    server = ScramServer("SCRAM-SHA-256", lambda _u: None)
    with pytest.raises(ScramError):
        server.first(message)


def test_a_refused_exchange_fails_even_with_the_right_password() -> None:
    users = {"alice": make_credential("SCRAM-SHA-256", b"secret")}
    server = ScramServer("SCRAM-SHA-256", users.get)
    client = ScramClient("SCRAM-SHA-256", "alice", b"secret")
    first = server.first(client.first())
    assert server.claimed == "alice"
    server.refused = True  # a lockout, decided after the name was read
    with pytest.raises(ScramError, match=r"^authentication failed$"):
        server.final(client.final(first))
    assert server.username is None


def test_broker_credentials_bind_one_broker_id() -> None:
    secret = "a" * 64
    server = ScramServer("SCRAM-SHA-256",
                         lambda u: broker_credential(secret, "SCRAM-SHA-256", u))
    client = ScramClient("SCRAM-SHA-256", "broker-2", broker_password(secret, 2))
    client.verify(server.final(client.final(server.first(client.first()))))
    assert broker_id_of(server.username) == 2
    # broker 1's password does not log in as broker 2, nor does another cluster's secret
    for password in (broker_password(secret, 1), broker_password("b" * 64, 2)):
        server = ScramServer("SCRAM-SHA-256",
                             lambda u: broker_credential(secret, "SCRAM-SHA-256", u))
        client = ScramClient("SCRAM-SHA-256", "broker-2", password)
        with pytest.raises(ScramError):
            server.final(client.final(server.first(client.first())))
    assert broker_credential(secret, "SCRAM-SHA-256", "alice") is None
    assert broker_id_of("alice") is None and broker_id_of(None) is None


def test_a_controller_voter_has_a_login_of_its_own() -> None:
    """``controller-<id>``: derived from the secret like a broker's, a different principal
    (never a broker id), and a broker's password does not log in as it."""
    secret = "a" * 64
    name = controller_username(3001)
    for password, ok in ((internal_password(secret, name), True),
                         (broker_password(secret, 3001), False)):
        server = ScramServer("SCRAM-SHA-256",
                             lambda u: broker_credential(secret, "SCRAM-SHA-256", u))
        client = ScramClient("SCRAM-SHA-256", name, password)
        if ok:
            client.verify(server.final(client.final(server.first(client.first()))))
        else:
            with pytest.raises(ScramError):
                server.final(client.final(server.first(client.first())))
    assert (controller_id_of(name), broker_id_of(name)) == (3001, None)
    assert controller_id_of("broker-1") is None and controller_id_of("controller-x") is None
    assert broker_id_of("broker-\u0663") is None  # only ASCII digits name a node


def test_plain_messages_and_passwords_checked_against_stored_scram_keys() -> None:
    credential = make_credential("SCRAM-SHA-256", b"right password")
    assert password_matches(credential, "SCRAM-SHA-256", b"right password")
    assert not password_matches(credential, "SCRAM-SHA-256", b"wrong password")
    token = plain_token("alice", b"right password")
    assert token == b"\0alice\0right password"
    assert parse_plain_token(token) == ("alice", b"right password")
    assert parse_plain_token(b"alice\0alice\0pw") == ("alice", b"pw")  # authzid = user
    for bad in (b"alice\0pw", b"\0\0pw", b"bob\0alice\0pw", b"\0\xff\0pw",
                b"\0a\0" + b"x" * 2000):
        with pytest.raises(ScramError):
            parse_plain_token(bad)

