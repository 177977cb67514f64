"""SCRAM user operations of :class:`~clients.admin.Admin`: DescribeUserScramCredentials
and AlterUserScramCredentials (KIP-554), with Kafka's value types.

Contract: each call is one request to any broker (every broker reads the same users).
``describe_user_scram_credentials(users)`` (None: every user) returns ``{user:
[ScramCredentialInfo] or error}`` (a user without credentials: RESOURCE_NOT_FOUND);
``alter_user_scram_credentials`` takes :class:`UserScramCredentialUpsertion` (the
password never leaves this process: the request carries the salt and
``Hi(password, salt, iterations)``, RFC 5802, a fresh random salt unless one is given)
and :class:`UserScramCredentialDeletion`, and returns ``{user: None or error}``;
per-user errors follow :func:`~clients.admin.requests.raise_first`, an error of the
whole request (no right to Describe the cluster) is raised.  Mechanisms by name:
``SCRAM-SHA-256``, ``SCRAM-SHA-512``.

Costs: one round trip; one PBKDF2 per upsertion (``iterations`` rounds).  Thread-safety:
none (one caller thread, as the Admin).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from clients.admin.requests import AdminRequests, raise_first
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError, error_for
from clients.protocol.message_types import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from clients.protocol.scram import DEFAULT_ITERATIONS, MECHANISMS, SALT_BYTES

__all__ = ["ScramCredentialInfo", "ScramUserAdmin", "UserScramCredentialDeletion",
           "UserScramCredentialUpsertion"]

MECHANISM_NUMBERS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


def _number(mechanism: str) -> int:
    if mechanism not in MECHANISM_NUMBERS:
        raise ValueError(f"SCRAM mechanism {mechanism!r} is not one of "
                         f"{', '.join(MECHANISM_NUMBERS)}")
    return MECHANISM_NUMBERS[mechanism]


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    mechanism: str
    iterations: int


@dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s password for ``mechanism`` (the password stays here)."""

    user: str
    mechanism: str
    password: bytes
    iterations: int = DEFAULT_ITERATIONS
    salt: bytes | None = None


@dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    user: str
    mechanism: str


class ScramUserAdmin:
    """DescribeUserScramCredentials and AlterUserScramCredentials."""

    def __init__(self, requests: AdminRequests) -> None:
        self._requests = requests

    def describe_user_scram_credentials(
            self, users: Sequence[str] | None = None, *, timeout_ms: int | None = None,
            raise_on_error: bool = True) -> dict[str, list[ScramCredentialInfo] | MiniKafkaError]:
        timeout = self._requests.timeout(timeout_ms)
        request: DescribeUserScramCredentialsRequest = {
            "users": None if users is None else [{"name": u} for u in users]}
        body = self._requests.request(None, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request,
                                      timeout, DescribeUserScramCredentialsResponse)
        if body["error_code"]:
            raise error_for(body["error_code"], body["error_message"] or "describe users")
        names = {m: n for n, m in MECHANISM_NUMBERS.items()}
        out: dict[str, list[ScramCredentialInfo] | MiniKafkaError] = {}
        for r in body["results"]:
            out[r["user"]] = (
                error_for(r["error_code"], r["error_message"] or f"describe {r['user']}")
                if r["error_code"] else
                [ScramCredentialInfo(names.get(c["mechanism"], str(c["mechanism"])),
                                     c["iterations"]) for c in r["credential_infos"]])
        return raise_first(out, raise_on_error)

    def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion
                                        | UserScramCredentialDeletion], *,
            timeout_ms: int | None = None,
            raise_on_error: bool = True) -> dict[str, MiniKafkaError | None]:
        timeout = self._requests.timeout(timeout_ms)
        request: AlterUserScramCredentialsRequest = {"deletions": [], "upsertions": []}
        for a in alterations:
            if isinstance(a, UserScramCredentialDeletion):
                request["deletions"].append({"name": a.user, "mechanism": _number(a.mechanism)})
                continue
            mechanism = _number(a.mechanism)  # ValueError for an unknown one
            salt = os.urandom(SALT_BYTES) if a.salt is None else a.salt
            salted = hashlib.pbkdf2_hmac(MECHANISMS[a.mechanism], a.password, salt,
                                         a.iterations)
            request["upsertions"].append({
                "name": a.user, "mechanism": mechanism, "iterations": a.iterations,
                "salt": salt, "salted_password": salted})
        body = self._requests.request(None, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request,
                                      timeout, AlterUserScramCredentialsResponse)
        out: dict[str, MiniKafkaError | None] = {
            r["user"]: error_for(r["error_code"], r["error_message"] or f"alter {r['user']}")
            if r["error_code"] else None for r in body["results"]}
        return raise_first(out, raise_on_error)
