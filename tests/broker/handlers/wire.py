"""Drive a :class:`BrokerCore`'s handlers through Kafka's codec, at a chosen version.

:func:`call` encodes the request body at ``version`` (so the handler gets exactly what
the broker decodes from a client of that version: every field of the version, defaults
for the rest), runs the handler, and returns the answers each encoded and decoded again
at that version (what the client reads: fields the version lacks are gone).  Fetch
answers' file regions are read into bytes as the frame is joined.

:func:`core_at` builds a standalone core on a manual clock; :meth:`CoreHarness.tick`
moves its time and runs what is due (the offsets-topic load, delayed operations).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import RegionRecords, RequestContext
from broker.handlers.dispatch import HANDLERS
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    decode_request,
    decode_response,
    encode_request_bytes,
    encode_response,
)
from clients.protocol.fetch_session.handler import highest_fetch_version
from clients.protocol.registry import APIS
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

Body = dict[str, Any]


def versions(api: int) -> list[int]:
    """Every version of ``api`` we serve, lowest first."""
    return list(range(APIS[api].min_version, APIS[api].max_version + 1))


def ends(api: int) -> list[int]:
    """The lowest and the highest served version of ``api``."""
    return [APIS[api].min_version, APIS[api].max_version]


_BUFFERS = (bytes, bytearray, memoryview)


def _frame_bytes(part: Any) -> Any:
    """One part of an encoded frame as bytes: a file region (``RegionRecords``, a Fetch
    answer's records, a part of its own) read, as a broker's ``sendfile`` sends it."""
    if type(part) in _BUFFERS:
        return part
    assert isinstance(part, RegionRecords), type(part)
    return b"".join(r.read_bytes() for r in part.regions)


def wire_answer(api: int, version: int, body: Body) -> Body:
    """``body`` as a client of ``version`` reads it."""
    frame = b"".join([_frame_bytes(p) for p in encode_response(api, version, 7, body)])
    return decode_response(memoryview(frame)[4:], api, version).body


def call(core: HandlerCore, api: int, body: Body, version: int | None = None,
         client_id: str = "wire-test",
         respond: Callable[[Body | None], None] | None = None) -> list[Body | None]:
    """Run the handler at ``version`` (default: our highest; for a Fetch the highest its
    topics allow: v13+ only by topic id); the list fills with the answers, as the
    client reads them, whenever they come (and each goes to ``respond`` too, when
    given)."""
    if version is None:
        version = APIS[api].max_version
        if api == ApiKey.FETCH:
            version = highest_fetch_version(body, version)
    frame = encode_request_bytes(api, version, 7, client_id, body)
    request = decode_request(memoryview(frame)[4:])
    answers: list[Body | None] = []

    def on_answer(answer: Body | None) -> None:
        answers.append(None if answer is None else wire_answer(api, version, answer))
        if respond is not None:
            respond(answers[-1])

    HANDLERS[api](core, request.body, on_answer, RequestContext(version, client_id))
    return answers


def call1(core: HandlerCore, api: int, body: Body, version: int | None = None) -> Body:
    """:func:`call` for an answer that must come at once."""
    answers = call(core, api, body, version)
    assert len(answers) == 1 and answers[0] is not None, answers
    return answers[0]


class CoreHarness:
    """A standalone core with a manual clock."""

    def __init__(self, data_dir: Path, **overrides: Any) -> None:
        self.clock = ManualClock(1_000_000)
        self.timer = SystemTimer(self.clock)
        config = BrokerConfig(node_id=0, data_dir=str(data_dir)).with_overrides(overrides)
        self.core = BrokerCore(config, self.clock, self.timer)
        self.core.startup()

    def tick(self, ms: int = 10, times: int = 1) -> None:
        for _ in range(times):
            self.clock.advance(ms)
            self.timer.advance_clock()

    def create(self, name: str, partitions: int = 1, **configs: str) -> None:
        self.core.create_topic(self.core.validate_new_topic(name, partitions, 1, configs))


@contextmanager
def core_at(data_dir: Path, **overrides: Any) -> Iterator[CoreHarness]:
    harness = CoreHarness(data_dir, **overrides)
    try:
        yield harness
    finally:
        harness.core.shutdown()
