"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as pure state machines, and the
credentials a cluster's brokers derive from its secret.

Sans-IO: :class:`ScramClient` and :class:`ScramServer` are fed the peer's messages (the
``auth_bytes`` of Kafka's SaslAuthenticate) and return the next one; sockets and event
loops are the callers' business.  One exchange, as Kafka runs it:

====  ==============================  =============================================
step  client -> server                server -> client
====  ==============================  =============================================
1     ``n,,n=<user>,r=<cnonce>``      ``r=<cnonce><snonce>,s=<salt b64>,i=<iter>``
2     ``c=biws,r=<nonce>,p=<proof>``  ``v=<server signature b64>``
====  ==============================  =============================================

No channel binding (``n,,``), no authzid, usernames with ``=2C``/``=3D`` escapes
(RFC 5802 §5.1).  The server learns a user's stored key and server key through a lookup
callback (:class:`ScramCredential`), so it never needs the password; a failure of any
kind raises :class:`ScramError` with a message safe to show the peer (it never says
whether the user exists).

Unknown users (:func:`decoy_credential`): the server answers a name it does not know
with a salt and iteration count derived from the name and a server key (HMAC-SHA256), so
the same name gets the same answer every time, in the form of a real user's (a 16-byte
salt, :data:`DEFAULT_ITERATIONS`); the final step then fails like a wrong password.  The
server computes the decoy for every name, known or not, so both paths cost the same
(three HMACs, no PBKDF2).

Broker credentials (:func:`broker_credential`): a cluster's nodes share one secret
(``cluster_secret`` in every node's config, written by ``minikafka cluster start``);
broker ``N`` logs in as ``broker-N`` with password HMAC-SHA256(secret, "broker-N"), so an
authenticated session is bound to one broker id and a node that knows the secret can
check any broker's proof.  Controller voter ``V`` of a quorum logs in to the other voters
the same way as ``controller-V`` (:func:`controller_id_of`): a principal of its own, which
the controller serves only the quorum's requests.

Costs: PBKDF2 with ``iterations`` rounds per login on the client (4096 by default:
about 2 ms with hashlib's C implementation); the server runs none for stored users and
unknown names alike (it keeps the salted keys; a decoy is three HMACs), one per
derived broker credential; the rest O(message).  Objects are one
exchange each, not shared between threads.  Primitives come from :mod:`hashlib` and
:mod:`hmac`; nothing here is hand-written cryptography.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 16  # of every salt this module makes: users', brokers' and decoys'
BROKER_PREFIX = "broker-"
CONTROLLER_PREFIX = "controller-"  # a controller quorum's voter
# the decoy key of a ScramServer not given one: stable for this process's life only
_PROCESS_DECOY_KEY = os.urandom(32)


class ScramError(Exception):
    """The exchange failed; the message may be shown to the peer."""


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps for a user (RFC 5802 §3): never the password itself."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unsupported SASL mechanism {mechanism!r}") from None


def make_credential(mechanism: str, password: bytes, salt: bytes | None = None,
                    iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """Salt and hash a password as a SCRAM server stores it."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(_hash(mechanism), password, salt, iterations)
    return credential_of_salted_password(mechanism, salted, salt, iterations)


def credential_of_salted_password(mechanism: str, salted_password: bytes, salt: bytes,
                                  iterations: int) -> ScramCredential:
    """What a server stores, from ``Hi(password, salt, iterations)`` (RFC 5802 §3; what
    Kafka's AlterUserScramCredentials carries instead of the password)."""
    name = _hash(mechanism)
    client_key = hmac.digest(salted_password, b"Client Key", name)
    return ScramCredential(salt, iterations, hashlib.new(name, client_key).digest(),
                           hmac.digest(salted_password, b"Server Key", name))


def password_matches(credential: ScramCredential, mechanism: str, password: bytes) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (SASL/PLAIN checks a
    password against the stored SCRAM keys; constant-time comparison)."""
    name = _hash(mechanism)
    salted = hashlib.pbkdf2_hmac(name, password, credential.salt, credential.iterations)
    stored = hashlib.new(name, hmac.digest(salted, b"Client Key", name)).digest()
    return hmac.compare_digest(stored, credential.stored_key)


PLAIN = "PLAIN"


def plain_token(username: str, password: bytes) -> bytes:
    """RFC 4616's message: empty authorization id, NUL, user, NUL, password."""
    return b"\0" + username.encode() + b"\0" + password


def parse_plain_token(token: bytes) -> tuple[str, bytes]:
    """(user, password) of a PLAIN message; ScramError when malformed or when it asks
    to act as someone else (an authorization id other than the user)."""
    parts = token.split(b"\0")
    if len(parts) != 3 or not parts[1] or len(token) > 1024:
        raise ScramError("malformed SASL/PLAIN message")
    authzid, user, password = parts
    try:
        name = user.decode()
    except UnicodeDecodeError:
        raise ScramError("SASL/PLAIN user name is not UTF-8") from None
    if authzid and authzid != user:
        raise ScramError("SASL/PLAIN authorization id must be empty or the user")
    return name, password


def broker_username(broker_id: int) -> str:
    return f"{BROKER_PREFIX}{broker_id}"


def broker_password(cluster_secret: str, broker_id: int) -> bytes:
    """Broker ``broker_id``'s password, derived from the cluster's secret."""
    return internal_password(cluster_secret, broker_username(broker_id))


def controller_username(voter_id: int) -> str:
    return f"{CONTROLLER_PREFIX}{voter_id}"


def internal_password(cluster_secret: str, username: str) -> bytes:
    """The password of a cluster's own node (``broker-N``, ``controller-N``): HMAC-SHA256
    of its name with the cluster's secret."""
    return hmac.digest(cluster_secret.encode(), username.encode(), "sha256")


def broker_credential(cluster_secret: str, mechanism: str, username: str
                      ) -> ScramCredential | None:
    """The credential of ``username`` if it names a broker (``broker-<id>``) or a
    controller voter (``controller-<id>``), else None.

    The salt is derived too (HMAC of the secret), so every node computes the same
    credential without storing anything."""
    if broker_id_of(username) is None and controller_id_of(username) is None:
        return None
    salt = hmac.digest(cluster_secret.encode(), f"salt:{username}".encode(),
                       "sha256")[:SALT_BYTES]
    return make_credential(mechanism, internal_password(cluster_secret, username), salt)


def decoy_credential(key: bytes, mechanism: str, username: str,
                     iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """What the server answers for ``username`` when it has no such user: a salt and keys
    derived from ``key`` (the server's secret), the mechanism and the name by HMAC-SHA256,
    so the answer is the same on every attempt (and on every server sharing ``key``) and
    has a real credential's form (:data:`SALT_BYTES` of salt, ``iterations``).  Its keys
    come from no password; the exchange fails anyway.  Cost: three HMACs."""
    name = _hash(mechanism)
    label = f"{mechanism}\0{username}".encode()

    def derive(purpose: bytes) -> bytes:
        return hmac.digest(key, purpose + b"\0" + label, "sha256")

    return ScramCredential(derive(b"salt")[:SALT_BYTES], iterations,
                           hmac.digest(derive(b"stored"), b"", name),
                           hmac.digest(derive(b"server"), b"", name))


def broker_id_of(principal: str | None) -> int | None:
    """The broker id an authenticated principal stands for, or None for anyone else."""
    return _node_id_of(principal, BROKER_PREFIX)


def controller_id_of(principal: str | None) -> int | None:
    """The controller voter id an authenticated principal stands for, or None."""
    return _node_id_of(principal, CONTROLLER_PREFIX)


def _node_id_of(principal: str | None, prefix: str) -> int | None:
    if principal is None or not principal.startswith(prefix):
        return None
    rest = principal[len(prefix):]
    return int(rest) if rest.isdigit() and rest.isascii() else None


def _attributes(message: bytes, what: str) -> dict[str, str]:
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None
    out: dict[str, str] = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed {what}")
        out.setdefault(part[0], part[2:])
    return out


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise ScramError("malformed username")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramClient:
    """The client side: :meth:`first` -> server's first -> :meth:`final` -> :meth:`verify`."""

    def __init__(self, mechanism: str, username: str, password: bytes,
                 nonce: str | None = None) -> None:
        self.hash = _hash(mechanism)
        self.username = username
        self.password = password
        self.nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self._bare = f"n={_escape(username)},r={self.nonce}"
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = _attributes(server_first, "server-first-message")
        nonce, salt_b64, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self.nonce) or salt_b64 is None or not iterations.isdigit():
            raise ScramError("malformed server-first-message")
        if not 1 <= int(iterations) <= 1_000_000:
            raise ScramError(f"iteration count {iterations} out of range")
        salted = hashlib.pbkdf2_hmac(self.hash, self.password, base64.b64decode(salt_b64),
                                     int(iterations))
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{server_first.decode()},{without_proof}".encode()
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        signature = hmac.digest(hashlib.new(self.hash, client_key).digest(), auth_message,
                                self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = hmac.digest(hmac.digest(salted, b"Server Key", self.hash),
                                             auth_message, self.hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final, "server-final-message")
        if "e" in attrs:
            raise ScramError(f"server refused: {attrs['e']}")
        expected = self._server_signature
        if expected is None or not hmac.compare_digest(
                base64.b64decode(attrs.get("v", "")), expected):
            raise ScramError("the server's signature does not match")


Lookup = Callable[[str], ScramCredential | None]


class ScramServer:
    """The server side: :meth:`first` (client's first) -> :meth:`final` (client's final);
    after a successful :meth:`final`, :attr:`username` is the authenticated user.

    ``decoy_key`` is the server's secret for unknown names (:func:`decoy_credential`);
    servers that must answer alike across restarts and nodes pass a persistent one.
    Setting :attr:`refused` after :meth:`first` (a locked-out user or address) makes
    :meth:`final` fail whatever the proof, after the same work as a wrong one."""

    def __init__(self, mechanism: str, lookup: Lookup, nonce: str | None = None, *,
                 decoy_key: bytes = _PROCESS_DECOY_KEY) -> None:
        self.mechanism = mechanism
        self.hash = _hash(mechanism)
        self.lookup = lookup
        self.decoy_key = decoy_key
        self.server_nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self.username: str | None = None
        self.started = False  # the client's first message was taken
        self.refused = False  # fail the final step whatever the proof
        self.claimed: str | None = None  # the name the client's first message gave
        self._credential: ScramCredential | None = None
        self._auth_prefix = ""
        self._nonce = ""
        self._known = False

    def first(self, client_first: bytes) -> bytes:
        self.started = True
        text = client_first.decode(errors="replace")
        if not text.startswith("n,,"):
            raise ScramError("channel binding and authzid are not supported")
        bare = text[3:]
        attrs = _attributes(bare.encode(), "client-first-message")
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("malformed client-first-message")
        self.claimed = _unescape(attrs["n"])
        credential = self.lookup(self.claimed)
        # An unknown user goes on with a decoy that is the same on every attempt, so the
        # answer does not tell whether the user exists; the final step then fails like a
        # bad password.  The decoy is made for known users too: both cost the same.
        decoy = decoy_credential(self.decoy_key, self.mechanism, self.claimed)
        self._credential = credential or decoy
        self._nonce = attrs["r"] + self.server_nonce
        c = self._credential
        server_first = (f"r={self._nonce},s={base64.b64encode(c.salt).decode()},"
                        f"i={c.iterations}")
        self._auth_prefix = f"{bare},{server_first}"
        self._known = credential is not None
        return server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        if self._credential is None:
            raise ScramError("client-final-message before client-first-message")
        attrs = _attributes(client_final, "client-final-message")
        if attrs.get("c") != "biws" or attrs.get("r") != self._nonce or "p" not in attrs:
            raise ScramError("malformed client-final-message")
        without_proof = client_final.decode().rsplit(",p=", 1)[0]
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        c = self._credential
        signature = hmac.digest(c.stored_key, auth_message, self.hash)
        try:
            proof = base64.b64decode(attrs["p"], validate=True)
        except ValueError:
            raise ScramError("malformed client proof") from None
        if len(proof) != len(signature):
            raise ScramError("authentication failed")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        matches = hmac.compare_digest(hashlib.new(self.hash, client_key).digest(),
                                      c.stored_key)  # computed for unknown users too
        if not (matches and self._known) or self.refused:
            raise ScramError("authentication failed")
        self.username = self.claimed
        server_signature = hmac.digest(c.server_key, auth_message, self.hash)
        return f"v={base64.b64encode(server_signature).decode()}".encode()
