"""Handlers of DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) over
the SCRAM users file every broker reads (:mod:`broker.users`, ``sasl_users_file``; the
one ``minikafka cluster add-user`` writes).

Contract (Kafka's rules and error codes):

- No ``sasl_users_file``: SECURITY_DISABLED (there are no client users to show or
  change).  Describe needs Describe on the Cluster, Alter needs Alter on it
  (CLUSTER_AUTHORIZATION_FAILED: at the top for Describe, for every user for Alter).
- Describe: ``users`` null or empty (Kafka's rule; librdkafka sends it empty) lists
  every user with its mechanisms and iterations (never a salt or key); a named user
  that has no credential gets RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE.
- Alter: one result per user named.  A user named twice across deletions and
  upsertions: DUPLICATE_RESOURCE (nothing done for it); a mechanism other than
  SCRAM-SHA-256 (1) / SCRAM-SHA-512 (2): UNSUPPORTED_SASL_MECHANISM; iterations outside
  4096-16384, an empty salt, a salted password of the wrong length or a name a users
  file cannot hold (1-64 of ``A-Z a-z 0-9 . _ -``, not ``broker-...``):
  UNACCEPTABLE_CREDENTIAL; deleting a credential that does not exist:
  RESOURCE_NOT_FOUND.  The valid changes are written together, under the file's edit
  lock; every broker re-reads the file within a second, so the new password logs in
  everywhere (a connection already logged in stays so, as in Kafka).  The server keeps
  only RFC 5802's stored and server keys, derived from the salted password.

Costs: one read of the file per request plus one rewrite when something changed; two
HMACs per upsertion.  Blocking file I/O on the event loop (a small file, an admin API).
Thread-safety: run on the broker's event loop thread only.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

from broker.acls import CLUSTER_RESOURCE
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, serves
from broker.requests.respond import Respond
from broker.users import Users, check_user_name, edit_users, read_users
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.message_types import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResponseResult,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponseResult,
)
from clients.protocol.scram import MECHANISMS, ScramCredential, credential_of_salted_password

MECHANISM_NUMBERS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MIN_ITERATIONS = 4096  # Kafka's bounds (ScramMechanism.minIterations, a 16384 maximum)
MAX_ITERATIONS = 16384


def _users_file(core: HandlerCore) -> Path:
    if not core.config.sasl_users_file:
        raise MiniKafkaError("this broker has no client users (no sasl_users_file)",
                             ErrorCode.SECURITY_DISABLED)
    return Path(core.config.sasl_users_file)


def _require_cluster(ctx: RequestContext, operation: str) -> None:
    if not ctx.allowed(operation, "Cluster", CLUSTER_RESOURCE):
        raise MiniKafkaError(f"not authorized to {operation} the cluster (needed to "
                             f"{'describe' if operation == 'Describe' else 'alter'} "
                             "SCRAM credentials)", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def _file_error(exc: Exception) -> MiniKafkaError:
    if isinstance(exc, MiniKafkaError) and exc.code is not None and not isinstance(
            exc, InvalidConfigError):
        return exc
    return MiniKafkaError(f"the users file: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR)


def handle_describe_user_scram_credentials(
        core: HandlerCore, body: DescribeUserScramCredentialsRequest,
        respond: Respond[DescribeUserScramCredentialsResponse], ctx: RequestContext) -> None:
    try:
        path = _users_file(core)
        _require_cluster(ctx, "Describe")
        users = read_users(path)
    except Exception as exc:
        error = _file_error(exc)
        respond({"throttle_time_ms": 0, "error_code": int(error.code),
                 "error_message": error.message, "results": []})
        return
    infos: dict[str, list[tuple[int, int]]] = {}
    for (name, mechanism), credential in sorted(users.items()):
        infos.setdefault(name, []).append((MECHANISM_NUMBERS[mechanism], credential.iterations))
    asked = [u["name"] for u in body["users"]] if body["users"] else None  # none: all
    counts = Counter(asked or ())
    results: list[DescribeUserScramCredentialsResponseResult] = []
    for name in (sorted(infos) if asked is None else dict.fromkeys(asked)):
        result: DescribeUserScramCredentialsResponseResult = {
            "user": name, "error_code": 0, "error_message": None, "credential_infos": []}
        if counts[name] > 1:
            result["error_code"] = int(ErrorCode.DUPLICATE_RESOURCE)
            result["error_message"] = f"user {name!r} is named more than once"
        elif name not in infos:
            result["error_code"] = int(ErrorCode.RESOURCE_NOT_FOUND)
            result["error_message"] = f"user {name!r} has no SCRAM credential"
        else:
            result["credential_infos"] = [{"mechanism": m, "iterations": i}
                                          for m, i in infos[name]]
        results.append(result)
    respond({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
             "results": results})


def _mechanism(number: int) -> str:
    for name, value in MECHANISM_NUMBERS.items():
        if value == number and name in MECHANISMS:
            return name
    raise MiniKafkaError(f"unknown SCRAM mechanism {number}",
                         ErrorCode.UNSUPPORTED_SASL_MECHANISM)


def _unacceptable(message: str) -> MiniKafkaError:
    return MiniKafkaError(message, ErrorCode.UNACCEPTABLE_CREDENTIAL)


def _credential(name: str, mechanism: str, iterations: int, salt: bytes,
                salted_password: bytes) -> ScramCredential:
    try:
        check_user_name(name)
    except InvalidConfigError as exc:
        raise _unacceptable(exc.message) from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise _unacceptable(f"iterations {iterations} outside {MIN_ITERATIONS}-"
                            f"{MAX_ITERATIONS}")
    if not salt:
        raise _unacceptable("the salt is empty")
    size = hashlib.new(MECHANISMS[mechanism]).digest_size
    if len(salted_password) != size:
        raise _unacceptable(f"a {mechanism} salted password has {size} bytes, not "
                            f"{len(salted_password)}")
    return credential_of_salted_password(mechanism, salted_password, salt, iterations)


def handle_alter_user_scram_credentials(
        core: HandlerCore, body: AlterUserScramCredentialsRequest,
        respond: Respond[AlterUserScramCredentialsResponse], ctx: RequestContext) -> None:
    names = [d["name"] for d in body["deletions"]] + [u["name"] for u in body["upsertions"]]
    errors: dict[str, MiniKafkaError] = {}
    try:
        path = _users_file(core)
        _require_cluster(ctx, "Alter")
    except MiniKafkaError as exc:
        respond({"throttle_time_ms": 0, "results": [
            {"user": n, "error_code": int(exc.code), "error_message": exc.message}
            for n in dict.fromkeys(names)]})
        return
    for name, count in Counter(names).items():
        if count > 1:
            errors[name] = MiniKafkaError(f"user {name!r} is altered more than once in the "
                                          "request", ErrorCode.DUPLICATE_RESOURCE)
    deletions: list[tuple[str, str]] = []
    upsertions: dict[tuple[str, str], ScramCredential] = {}
    for d in body["deletions"]:
        if d["name"] not in errors:
            try:
                deletions.append((d["name"], _mechanism(d["mechanism"])))
            except MiniKafkaError as exc:
                errors[d["name"]] = exc
    for u in body["upsertions"]:
        if u["name"] not in errors:
            try:
                mechanism = _mechanism(u["mechanism"])
                upsertions[(u["name"], mechanism)] = _credential(
                    u["name"], mechanism, u["iterations"], u["salt"], u["salted_password"])
            except MiniKafkaError as exc:
                errors[u["name"]] = exc

    def change(users: Users) -> Users:
        for key in deletions:
            if key not in users:
                errors[key[0]] = MiniKafkaError(f"user {key[0]!r} has no {key[1]} credential",
                                                ErrorCode.RESOURCE_NOT_FOUND)
            else:
                del users[key]
        users.update(upsertions)
        return users

    if deletions or upsertions:
        try:
            edit_users(path, change)
        except Exception as exc:
            failed = _file_error(exc)
            for name in names:
                errors.setdefault(name, failed)
    results: list[AlterUserScramCredentialsResponseResult] = []
    for name in dict.fromkeys(names):
        error = errors.get(name)
        results.append({"user": name, "error_code": 0 if error is None else int(error.code),
                        "error_message": None if error is None else error.message})
    respond({"throttle_time_ms": 0, "results": results})


SCRAM_USER_HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: serves(handle_describe_user_scram_credentials),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: serves(handle_alter_user_scram_credentials),
}
