"""Who is on the other end of a connection: SASL/SCRAM sessions and the broker-only rules.

A cluster started by ``minikafka cluster start`` has a secret (``cluster_secret_file`` in
every node's config; :func:`read_cluster_secret`).  With it, the internal APIs are for the
cluster's own brokers only:

=====================================  =================================================
request                                served only on a connection authenticated as
=====================================  =================================================
BrokerRegistration, BrokerHeartbeat,   ``broker-<id>`` where ``<id>`` is the request's
AlterPartition, AllocateProducerIds    ``broker_id`` (controller)
Fetch of the metadata log              any broker of the cluster (controller)
Fetch / OffsetsForLeaderEpoch with     ``broker-<replica_id>``, and that broker must be a
``replica_id >= 0``                    replica of the partition (leader; else the
                                       request is answered CLUSTER_AUTHORIZATION_FAILED
                                       and no follower state moves)
Vote, BeginQuorumEpoch,                ``controller-<id>`` (a controller quorum's voter,
EndQuorumEpoch, a Fetch with a         :func:`controller_login`), the voter the request
voter's ``replica_id``                 names as its sender (controller; checked by
                                       ``QuorumDriver.handle_request``); a voter's login
                                       gets these and DescribeQuorum only
=====================================  =================================================

The controller serves nothing else to anyone but a broker: before a login a connection
gets ApiVersions and the SASL exchange only (anything else closes it, :func:`needs_login`),
and only a broker can log in there (client users' mechanisms are not offered), so
Metadata, CreateTopics and the other admin APIs reach it only as a broker forwards them,
after checking its client's login and ACLs (:func:`broker_request_refusal`).

A broker proves its id with SASL SCRAM-SHA-256 (Kafka's SaslHandshake v1 +
SaslAuthenticate, :mod:`clients.protocol.scram`) using the credentials derived from the
secret; a refusal is CLUSTER_AUTHORIZATION_FAILED with a text that names no epoch.
Without a secret (a node started by hand for a test) nothing is enforced: say so in
production docs (docs/security.md).  Client users log in the same way (SCRAM-SHA-256 or
-512) with credentials from the users file (:mod:`broker.users`); with
``client_auth_required`` a broker serves a connection nothing but ApiVersions and the
SASL exchange until it has logged in (:func:`needs_login`, checked on every port before
anything else is looked at in a request, its per-request bounds included).

Password guessing (issue 30): a failed login ends the connection's SASL exchange for
good (:attr:`SaslSession.failed`; the server answers it after
``connection_failed_authentication_delay_ms`` and closes the connection), is counted per
user and per address (:mod:`broker.login_failures`), and a locked-out user or address
fails whatever its password, answered like a wrong password.  Brokers' own names
(``broker-<id>``) are neither counted nor locked out: their keys come from the cluster
secret, guessing them is hopeless, and a client guessing them from a broker's address
must not lock the broker out.

Unknown names (issue 30): a SCRAM server answers a name it does not know with a decoy
salt and iteration count derived from the name and the server's decoy key
(:func:`clients.protocol.scram.decoy_credential`), the same on every attempt; SASL/PLAIN
checks an unknown name's password against the same decoy (one PBKDF2, like a user's).
The key (:func:`scram_decoy_key`) is derived from the cluster secret when there is one:
every node of the cluster and every restart answers a name alike, as they do for a real
user (whose salt is in the shared users file).  Without a secret it is a random key kept
in the data dir (:data:`DECOY_KEY_FILE`, mode 600), so a restart is no tell either; two
brokers started by hand without a secret have different keys, and comparing their
answers tells which names exist (give them a secret).  A per-process key was not chosen:
every restart would change unknown names' salts and not real users'.

:class:`SaslSession` is one connection's state (sans-IO: fed request bodies, returns
answer bodies); the servers keep one per connection and drop it when it closes.  Costs:
no PBKDF2 for a SCRAM login of a user (stored keys) or an unknown name (three HMACs for
the decoy, done for every name), one (4096 rounds, ~2 ms) for a PLAIN login and for a
broker's derived credential (cached per name); the checks are O(1).  Not thread-safe:
each server's event loop owns its sessions.
"""

from __future__ import annotations

import functools
import hmac
import os
import stat
from pathlib import Path
from typing import Any

from broker.login_failures import MAX_NAME_CHARS, LoginFailures
from broker.users import ScramUsers
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, InvalidConfigError
from clients.protocol.scram import (
    MECHANISMS,
    PLAIN,
    ScramCredential,
    ScramError,
    ScramServer,
    broker_credential,
    broker_id_of,
    broker_password,
    broker_username,
    controller_id_of,
    controller_username,
    decoy_credential,
    internal_password,
    parse_plain_token,
    password_matches,
)

BROKER_MECHANISM = "SCRAM-SHA-256"
MIN_SECRET_CHARS = 32
DECOY_KEY_FILE = "scram_decoy.key"  # in a data dir, without a cluster secret
_DECOY_KEY_BYTES = 32
_PROCESS_DECOY_KEY = os.urandom(_DECOY_KEY_BYTES)  # without a secret or a data dir
# controller APIs only brokers send; their body names the sending broker's id
BROKER_ID_APIS = {ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT,
                  ApiKey.ALTER_PARTITION, ApiKey.ALLOCATE_PRODUCER_IDS}
# what a controller quorum's voter (``controller-<id>``) sends another voter; the quorum
# requests are for voters only (the driver checks the sender is the logged-in voter)
VOTER_APIS = frozenset({ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
                        ApiKey.FETCH_SNAPSHOT, ApiKey.FETCH, ApiKey.DESCRIBE_QUORUM})
QUORUM_ONLY_APIS = frozenset({ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
                              ApiKey.FETCH_SNAPSHOT})


def is_internal(user: str | None) -> bool:
    """A name of the cluster's own nodes (``broker-<id>``, ``controller-<id>``): derived
    from the secret, never counted or locked out."""
    return broker_id_of(user) is not None or controller_id_of(user) is not None


def read_cluster_secret(path: str) -> str:
    """The secret in ``path`` ("" for no path); the file must be readable by its owner only."""
    if not path:
        return ""
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigError(f"cluster_secret_file {path}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidConfigError(f"cluster_secret_file {path} is readable by others "
                                 f"(mode {stat.S_IMODE(mode):o}); chmod 600 it")
    if len(text) < MIN_SECRET_CHARS:
        raise InvalidConfigError(f"cluster_secret_file {path}: the secret must have at least "
                                 f"{MIN_SECRET_CHARS} characters")
    return text


def write_cluster_secret(path: Path) -> None:
    """Create ``path`` with a new random secret (mode 600); keep an existing one."""
    if path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(os.urandom(32).hex() + "\n")
        f.flush()
        os.fsync(f.fileno())


def broker_login(secret: str, broker_id: int) -> tuple[str, bytes] | None:
    """What broker ``broker_id`` logs in with (None without a secret: no login)."""
    return (broker_username(broker_id), broker_password(secret, broker_id)) if secret else None


def controller_login(secret: str, voter_id: int) -> tuple[str, bytes] | None:
    """What controller voter ``voter_id`` logs in to the other voters with (None without a
    secret: no login)."""
    name = controller_username(voter_id)
    return (name, internal_password(secret, name)) if secret else None


def scram_decoy_key(secret: str, data_dir: Path | None) -> bytes:
    """The key unknown names' decoy salts derive from (see the module docstring): from
    the cluster secret when there is one; else the key in ``data_dir``/DECOY_KEY_FILE,
    created (mode 600) on first use; else (no data dir) a random one for this process."""
    if secret:
        return hmac.digest(secret.encode(), b"minikafka scram decoy key", "sha256")
    if data_dir is None:
        return _PROCESS_DECOY_KEY
    path = data_dir / DECOY_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_decoy_key(path)
    key = os.urandom(_DECOY_KEY_BYTES)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(key.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    return key


def _read_decoy_key(path: Path) -> bytes:
    try:
        key = bytes.fromhex(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        key = b""
        why = str(exc)
    else:
        why = f"{len(key)} bytes, not {_DECOY_KEY_BYTES}"
    if len(key) != _DECOY_KEY_BYTES:
        raise InvalidConfigError(f"{path}: not a key ({why}); delete it to make a new one")
    return key


@functools.lru_cache(maxsize=256)
def _broker_credential(secret: str, mechanism: str, user: str) -> ScramCredential | None:
    """A broker's credential (one PBKDF2), kept for the next login of the same name."""
    return broker_credential(secret, mechanism, user)


class SaslSession:
    """One connection's SASL state: handshake, then SCRAM messages, then a principal;
    or a failure, after which the exchange is over (:attr:`failed`).

    ``failures`` counts failed logins and says who is locked out (None: nothing counted),
    ``address`` is the peer's; ``decoy_key`` is :func:`scram_decoy_key`'s."""

    __slots__ = ("address", "decoy_key", "failure", "failures", "locked_out", "mechanism",
                 "plain", "principal", "scram", "secret", "users")

    def __init__(self, secret: str, users: ScramUsers | None = None,
                 plain: bool = False, *, decoy_key: bytes | None = None,
                 failures: LoginFailures | None = None, address: str = "") -> None:
        self.secret = secret
        self.users = users
        self.plain = plain  # the connection is TLS: SASL/PLAIN may be offered
        self.decoy_key = decoy_key if decoy_key is not None else scram_decoy_key(secret, None)
        self.failures = failures
        self.address = address
        self.mechanism: str | None = None
        self.scram: ScramServer | None = None
        self.principal: str | None = None
        # a login failed (what, for the server's log): the server answers it late and
        # closes the connection; locked_out: because its user or address was
        self.failure: str | None = None
        self.locked_out = False

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def offered(self) -> list[str]:
        """The mechanisms this server takes: SCRAM-SHA-256 for brokers (with a secret),
        both SCRAM mechanisms for client users (with a users file), and PLAIN for them
        on a TLS port only (PLAIN sends the password itself)."""
        if self.users is not None and self.users.enabled:
            return sorted(MECHANISMS) + ([PLAIN] if self.plain else [])
        return [BROKER_MECHANISM] if self.secret else []

    def _credential(self, mechanism: str, user: str) -> ScramCredential | None:
        if is_internal(user):  # brokers and voters: derived from the secret, if any
            return _broker_credential(self.secret, mechanism, user) if self.secret else None
        return self.users.credential(mechanism, user) if self.users is not None else None

    def handshake(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        offered = self.offered()
        mechanism = body["mechanism"]
        if version == 0:  # v0 sends raw tokens after the handshake: not served
            return {"error_code": int(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                    "mechanisms": offered}
        if mechanism not in offered or self.principal is not None or self.failed:
            return {"error_code": int(ErrorCode.UNSUPPORTED_SASL_MECHANISM
                                      if self.principal is None and not self.failed
                                      else ErrorCode.ILLEGAL_SASL_STATE),
                    "mechanisms": offered}
        self.mechanism = mechanism
        if mechanism != PLAIN:
            self.scram = ScramServer(mechanism,
                                     lambda user: self._credential(mechanism, user),
                                     decoy_key=self.decoy_key)
        return {"error_code": 0, "mechanisms": offered}

    def _refusal(self, user: str | None) -> str | None:
        """Why this login must fail whatever its password (a lockout), or None; brokers'
        names are never locked out (see the module docstring)."""
        if self.failures is None or is_internal(user):
            return None
        return self.failures.refusal(user, self.address)

    def _fail(self, user: str | None, why: str, *, locked_out: bool) -> dict[str, Any]:
        """The exchange is over: count the failure (not a broker's, nor one refused by a
        lockout: a lockout ends on time), answer it like any failure."""
        name = "no name" if user is None else repr(user[:MAX_NAME_CHARS])
        self.failure = f"{name}{' (locked out)' if locked_out else ''}: {why}"
        self.locked_out = locked_out
        self.scram = None
        self.mechanism = None
        if self.failures is not None and not is_internal(user) and not locked_out:
            self.failures.record(user, self.address)
        return {"error_code": int(ErrorCode.SASL_AUTHENTICATION_FAILED),
                "error_message": why, "auth_bytes": b""}

    def _plain(self, token: bytes) -> dict[str, Any]:
        """SASL/PLAIN: one message; the password is checked against the user's stored
        SCRAM-SHA-256 keys (the users file keeps no passwords).  Brokers do not log in
        with PLAIN."""
        user: str | None = None
        refusal: str | None = None
        try:
            user, password = parse_plain_token(token)
            refusal = self._refusal(user)
            credential = (None if is_internal(user) or self.users is None
                          else self.users.credential(BROKER_MECHANISM, user))
            # an unknown user costs the same PBKDF2 as a known one: no timing tell
            decoy = decoy_credential(self.decoy_key, BROKER_MECHANISM, user)
            matches = password_matches(credential or decoy, BROKER_MECHANISM, password)
            if credential is None or not matches or refusal is not None:
                raise ScramError("unknown user or wrong password")
        except ScramError as exc:
            return self._fail(user, str(exc), locked_out=refusal is not None)
        self.mechanism = None
        self.principal = user
        return {"error_code": 0, "error_message": None, "auth_bytes": b"",
                "session_lifetime_ms": 0}

    def authenticate(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.mechanism == PLAIN and self.principal is None and not self.failed:
            return self._plain(bytes(body["auth_bytes"]))
        scram = self.scram
        if scram is None:
            return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE),
                    "error_message": "SaslAuthenticate after a failed login"
                    if self.failed else "SaslAuthenticate before SaslHandshake",
                    "auth_bytes": b""}
        token = bytes(body["auth_bytes"])
        try:
            if not scram.started:
                answer = scram.first(token)
                # a locked-out user or address goes on like anyone and fails at the end
                scram.refused = self._refusal(scram.claimed) is not None
            else:
                answer = scram.final(token)
                self.principal = scram.username
                self.scram = None
        except ScramError as exc:
            return self._fail(scram.claimed, str(exc), locked_out=scram.refused)
        return {"error_code": 0, "error_message": None, "auth_bytes": answer,
                "session_lifetime_ms": 0}


# what a connection may send before it has logged in (Kafka's SASL listener rule)
BEFORE_LOGIN_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE,
                               ApiKey.SASL_AUTHENTICATE})


def broker_request_refusal(principal: str | None, api_key: int, body: dict[str, Any]
                           ) -> str | None:
    """Why the controller (with a secret) must refuse this request from ``principal``
    (None: allowed): everything but ApiVersions and the SASL exchange is for the
    cluster's brokers, and the broker-id APIs for the broker they name."""
    if api_key in BEFORE_LOGIN_APIS:
        return None
    if controller_id_of(principal) is not None:
        return None if api_key in VOTER_APIS else (
            f"{ApiKey(api_key).name} on the controller is for the cluster's brokers")
    who = broker_id_of(principal)
    if api_key in QUORUM_ONLY_APIS:
        return f"{ApiKey(api_key).name} is for the controller quorum's voters"
    if who is None:
        return f"{ApiKey(api_key).name} on the controller is for the cluster's brokers"
    if api_key in BROKER_ID_APIS and body["broker_id"] != who:
        return f"broker {who} cannot act for broker {body['broker_id']}"
    return None


def needs_login(required: bool, session: SaslSession | None, api_key: int) -> bool:
    """True when ``api_key`` must not be served on this connection yet: client logins
    are required and the connection has not logged in (as a user or a broker)."""
    return (required and api_key not in BEFORE_LOGIN_APIS
            and (session is None or session.principal is None))
