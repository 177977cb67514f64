"""Which requests of one connection the main process works on at once (issue 36).

A network process hands the main process up to ``MAX_PIPELINED_REQUESTS`` requests of one
connection (:mod:`broker.network.process`).  Kafka serves a connection one request at a
time; :class:`RequestLanes` keeps that rule except for the case that pays: **Produce
after Produce**.  A request of a connection is dispatched (given a ticket in the
connection's :class:`~broker.network.channel.answer_order.AnswerOrder` and run)

- at once when the connection has no unanswered request; or
- at once when it is a Produce and every unanswered request of the connection is a
  Produce whose frame is not kept (its records were checked and appended on the loop,
  it waits only for its followers in the produce purgatory);
- otherwise it waits in the connection's lane, in arrival order, until those hold.

So a producer's next request is appended while the previous one waits for its
followers (the acks=all chain no longer runs one request at a time), appends of one
connection keep their order (a Produce whose records are checked off the loop, or whose
transaction is verified first, holds its frame: nothing of its connection starts before
it is appended, so sequence numbers arrive in order, as Kafka's idempotence rules want),
and every other API sees what it saw before (nothing else of its connection in flight:
a JoinGroup is not overtaken by a Heartbeat, a login completes before the next request).
Answers go back in request order whatever order they finish in
(:class:`~broker.network.channel.answer_order.AnswerOrder`).

Contract: :meth:`RequestLanes.admit` takes each REQUEST as it arrives (its buffer claimed
by the endpoint); the lanes own the frame from then on: attached, handed to
``dispatch(endpoint, conn_id, frame, keep_frame, ticket)`` as a memoryview, freed when
``dispatch`` returns unless the handler called ``keep_frame()`` (then it calls the
function that returns once it is done with the frame: freed, and the connection's next
request may start); the endpoint's ``on_answered`` reports each answer given
(:meth:`answered`); :meth:`closed` / :meth:`endpoint_gone` when a connection or a whole
network process is gone (waiting frames are freed).

Costs: O(1) per request (a dict lookup, a deque append/pop, the API key read from the
frame's first two bytes); a lane exists only while its connection has requests waiting
or unanswered.  Memory: waiting frames are the network process's pipelined requests,
at most ``MAX_PIPELINED_REQUESTS`` per connection, already in the pool.
Thread-safety: none; the main process's event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from broker.network.channel.codec import Handle
from broker.network.channel.main_side import MainChannelEndpoint
from clients.memory.buffer_pool import BufferPool
from clients.memory.handles import Buffer
from clients.protocol.api_keys import ApiKey

_PRODUCE = int(ApiKey.PRODUCE)

# keep_frame(): the handler finishes later (a Produce checked off the loop); it calls
# the function returned once it no longer needs the frame
KeepFrame = Callable[[], Callable[[], None]]
# dispatch(endpoint, conn_id, frame, keep_frame, ticket)
Dispatch = Callable[[MainChannelEndpoint, int, memoryview, KeepFrame, int], None]


class _Lane:
    __slots__ = ("kept", "mixed", "running", "waiting")

    def __init__(self) -> None:
        self.waiting: deque[tuple[Buffer, int, int]] = deque()  # buffer, frame_len, api
        self.kept = 0  # dispatched requests whose frame is still held (off the loop)
        self.mixed = False  # an unanswered request of this connection is not a Produce
        self.running = False  # dispatching now (an answer given meanwhile re-enters)


class RequestLanes:
    """Per connection: when its next request may start (see the module docstring)."""

    def __init__(self, pool: BufferPool, dispatch: Dispatch) -> None:
        self._pool = pool
        self._dispatch = dispatch
        self._lanes: dict[tuple[int, int], _Lane] = {}
        self.requests_handled = 0

    def admit(self, endpoint: MainChannelEndpoint, conn_id: int, handle: Handle,
              frame_len: int) -> None:
        """A request of ``conn_id`` arrived: dispatched now or queued behind others."""
        buffer = self._pool.attach_buffer(handle)  # type: ignore[arg-type]
        key = (endpoint.index, conn_id)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        api = int.from_bytes(buffer.memory[0:2], "big") if frame_len >= 2 else -1
        lane.waiting.append((buffer, frame_len, api))
        self._drain(endpoint, conn_id, lane)

    def answered(self, endpoint: MainChannelEndpoint, conn_id: int) -> None:
        """An answer of ``conn_id`` was given: a waiting request may start."""
        lane = self._lanes.get((endpoint.index, conn_id))
        if lane is not None:
            self._drain(endpoint, conn_id, lane)

    def closed(self, index: int, conn_id: int) -> None:
        """``conn_id`` of network process ``index`` is gone: its waiting frames freed."""
        lane = self._lanes.pop((index, conn_id), None)
        if lane is not None:
            for buffer, _, _ in lane.waiting:
                self._pool.deallocate(buffer)
            lane.waiting.clear()

    def endpoint_gone(self, index: int) -> None:
        """Network process ``index`` died: every connection of it is gone."""
        for key in [k for k in self._lanes if k[0] == index]:
            self.closed(*key)

    def __len__(self) -> int:
        return len(self._lanes)

    def _may_start(self, unanswered: int, lane: _Lane, api: int) -> bool:
        if lane.kept:
            return False
        return unanswered == 0 or (api == _PRODUCE and not lane.mixed)

    def _drain(self, endpoint: MainChannelEndpoint, conn_id: int, lane: _Lane) -> None:
        if lane.running:
            return  # the dispatch loop below looks again when the handler returns
        key = (endpoint.index, conn_id)
        answers = endpoint.answers
        lane.running = True
        try:
            while lane.waiting:
                unanswered = answers.unanswered(conn_id)
                api = lane.waiting[0][2]
                if not self._may_start(unanswered, lane, api):
                    break
                buffer, frame_len, _ = lane.waiting.popleft()
                lane.mixed = (lane.mixed and unanswered > 0) or api != _PRODUCE
                lane.kept += 1
                if not self._run(endpoint, conn_id, lane, buffer, frame_len,
                                 answers.ticket(conn_id)):
                    lane.kept -= 1
        finally:
            lane.running = False
        if (not lane.waiting and not lane.kept and not answers.unanswered(conn_id)
                and self._lanes.get(key) is lane):
            del self._lanes[key]

    def _run(self, endpoint: MainChannelEndpoint, conn_id: int, lane: _Lane,
             buffer: Buffer, frame_len: int, ticket: int) -> bool:
        """Dispatch one request; True when the handler kept its frame."""
        pool, frame, kept = self._pool, buffer.memory[:frame_len], False

        def free() -> None:
            frame.release()
            pool.deallocate(buffer)

        def free_kept() -> None:
            free()
            self._released(endpoint, conn_id, lane)

        def keep_frame() -> Callable[[], None]:
            nonlocal kept
            kept = True
            return free_kept

        try:
            self._dispatch(endpoint, conn_id, frame, keep_frame, ticket)
        finally:
            if not kept:
                free()
        self.requests_handled += 1
        return kept

    def _released(self, endpoint: MainChannelEndpoint, conn_id: int, lane: _Lane) -> None:
        """A kept frame of ``lane`` was freed (its Produce appended, or refused)."""
        if self._lanes.get((endpoint.index, conn_id)) is not lane:
            return  # the connection is gone (its id may be a new connection's now)
        lane.kept -= 1
        self._drain(endpoint, conn_id, lane)
