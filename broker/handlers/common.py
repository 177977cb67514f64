"""Shared vocabulary of the API handlers: request/response bodies, the ``respond``
callback, the handler signature, file-region Records and per-partition error fields.

A handler is ``handler(core, body, respond, ctx)``, typed with its API's generated
message types (:mod:`clients.protocol.message_types`): ``body`` is e.g. a
``ProduceRequest`` and ``respond`` a ``Respond[ProduceResponse]``, so mypy checks every
field name a handler reads or writes.  The tables the server dispatches on hold
:data:`Handler` s over plain :data:`Body` dicts; :func:`serves` is the one typed boundary
between the two (a decoded body of API ``k`` enters the handler registered for ``k``).
It gets the broker as a
:class:`~broker.handlers.broker_view.HandlerCore`, the
decoded request body (every field of the request's version filled, defaults for the
fields that version does not carry), ``respond`` and the :class:`RequestContext` (the
request's API version and client id).  A body's shape depends on its version (e.g.
LeaveGroup's ``member_id`` in v0-2, ``members`` from v3), so a handler whose API changed
shape reads ``ctx.version`` and answers in the shape of that version; the encoder drops
the fields the version does not carry.  ``respond(body)`` is called exactly once, now or
later (a delayed produce or fetch answers from the purgatory); ``respond(None)`` means
"no response" (acks=0).  Fetch responses carry :class:`RegionRecords`: file regions the
network process sends with ``sendfile``; no record byte passes through this process.

Costs: O(1) helpers.  Thread-safety: immutable values and pure functions; handlers
themselves run on the broker's event loop thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypedDict, TypeVar, cast

from broker.acls import Authorizer
from broker.handlers.broker_view import HandlerCore
from broker.handlers.record_checks import RecordCheckThread
from broker.requests.respond import Respond, ResponseT
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.scram import broker_id_of
from storage.log.reader import FileRegion

Body = dict[str, Any]  # a body of any API: what the server decodes and encodes
RequestT = TypeVar("RequestT", bound=Mapping[str, object])


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows of a request besides its body: the API version it came at
    (answer in that version's shape), the client id of its header, who the
    connection authenticated as (:mod:`broker.auth`), and the server's means to finish
    a request later (the record-check thread, keeping the frame)."""

    version: int
    client_id: str = ""
    principal: str | None = None  # who the connection logged in as (SASL), if anyone
    brokers_authenticate: bool = False  # the cluster has a secret (broker.auth)
    authorizer: Authorizer | None = None  # ACLs (broker.acls); None: everything allowed
    # False on the client listener of a broker with an internal listener: requests as a
    # replica (follower fetches) are served on the internal listener only
    replication_allowed: bool = True
    # where a Produce's record checks may finish off the event loop (None: all of them
    # run in the handler, as in tests and the simulation; broker.handlers.record_checks)
    record_checks: RecordCheckThread | None = None
    # keep the request's frame (its records) past the handler's return; returns the
    # function that frees it (call it once, on the loop). None: the caller keeps it.
    keep_frame: Callable[[], Callable[[], None]] | None = None

    def allowed_somewhere(self, operation: str, resource_type: str) -> bool:
        """Whether the user may do ``operation`` on at least one such resource."""
        return self.authorizer is None or self.authorizer.allowed_somewhere(
            self.principal, operation, resource_type)

    def allowed(self, operation: str, resource_type: str, name: str) -> bool:
        """Whether this request's user may do ``operation`` on the resource (ACLs)."""
        return self.authorizer is None or self.authorizer.allowed(
            self.principal, operation, resource_type, name)

    def may_act_as_broker(self, broker_id: int) -> bool:
        """Whether this request may speak for broker ``broker_id`` (a follower fetch): it
        came on a listener that serves replication, from that broker when brokers log in."""
        return self.replication_allowed and (
            not self.brokers_authenticate or broker_id_of(self.principal) == broker_id)


Handler = Callable[[HandlerCore, Body, Respond[Body], RequestContext], None]
TypedHandler: TypeAlias = Callable[
    [HandlerCore, RequestT, Respond[ResponseT], RequestContext], None]


def serves(handler: TypedHandler[RequestT, ResponseT]) -> Handler:
    """``handler`` as an entry of a dispatch table: the typed boundary where a decoded
    body (every field of its API filled, :mod:`clients.protocol.message_types`) enters
    the handler of its API, and the handler's typed answer leaves as a body to encode."""
    return cast(Handler, handler)


@dataclass(frozen=True)
class RegionRecords:
    """A Records value made of file regions; ``length`` is what the encoder needs."""

    regions: tuple[FileRegion, ...]
    length: int

    def __len__(self) -> int:
        return self.length


EMPTY_RECORDS = RegionRecords((), 0)


_DENIED = {"Topic": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
           "Group": ErrorCode.GROUP_AUTHORIZATION_FAILED,
           "Cluster": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}


def require(ctx: RequestContext, operation: str, resource_type: str, name: str) -> None:
    """Raise Kafka's *_AUTHORIZATION_FAILED error unless the request's user may do
    ``operation`` on the resource (ACLs, :mod:`broker.acls`)."""
    if not ctx.allowed(operation, resource_type, name):
        raise MiniKafkaError(f"not authorized to {operation} {resource_type.lower()} "
                             f"{name!r}", _DENIED[resource_type])


class ErrorFields(TypedDict):
    """The two error fields most results carry (``result.update(error_fields(exc))``)."""

    error_code: int
    error_message: str | None


def error_fields(exc: MiniKafkaError) -> ErrorFields:
    """The ``error_code`` / ``error_message`` fields of a result that failed with ``exc``."""
    return {"error_code": int(exc.code), "error_message": exc.message or None}


def as_minikafka_error(exc: Exception) -> MiniKafkaError:
    """``exc`` itself, or UNKNOWN_SERVER_ERROR for an exception that has no error code."""
    if isinstance(exc, MiniKafkaError):
        return exc
    return MiniKafkaError(f"{type(exc).__name__}: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR)


def duplicates(names: list[str]) -> set[str]:
    """Names given more than once (Kafka answers INVALID_REQUEST for each of them)."""
    seen: set[str] = set()
    return {n for n in names if n in seen or seen.add(n)}  # type: ignore[func-returns-value]
