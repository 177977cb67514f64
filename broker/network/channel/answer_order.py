"""The answers of one connection, posted to its network process in request order.

A network process may hand the main process several requests of one connection
(``MAX_PIPELINED_REQUESTS``) and writes the answers in the order they arrive, taking each
as the answer to the connection's oldest pending request.  The main process finishes
requests in another order (a Produce waiting for its followers while the next one is
appended; a response parked for pool memory), so :class:`AnswerOrder` puts them back in
order: the main process takes a *ticket* per request when it dispatches it (tickets count
up per connection, in dispatch order, which is the order the requests arrived in), and
an answer given with its ticket is posted at once when every earlier ticket was answered,
otherwise held until they are; posting an answer posts the held ones that follow it.

Contract: ``ticket`` is called once per dispatched request, in request order; ``answer``
once per ticket (RESPONSE or NO_RESPONSE message), in any order (an answer for a
connection already forgotten is posted as it comes: the network process frees a late
response); ``forget`` when the connection is gone (CLOSED, CLOSE sent, its network
process died), which frees the response buffers of held answers through ``free``.
A connection whose every ticket was answered holds nothing here.  Held answers are
bounded by the tickets outstanding, i.e. by ``MAX_PIPELINED_REQUESTS`` per connection
(the network process never hands over more).

Costs: O(1) per ticket and per answer (a dict entry per connection with unanswered
requests; held answers in a dict by ticket).  Thread-safety: none; the main process's
event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.network.channel.codec import RESPONSE, Handle, Message


class _Lane:
    __slots__ = ("held", "next_out", "next_ticket")

    def __init__(self) -> None:
        self.next_ticket = 0  # the ticket the next dispatched request gets
        self.next_out = 0  # the ticket whose answer is posted next
        self.held: dict[int, Message] = {}  # answered out of order, by ticket


class AnswerOrder:
    """Per connection: answers posted in ticket order (see the module docstring).

    ``post`` sends one message to the network process (True when posted; False when the
    channel is gone: a RESPONSE's buffer is then freed by ``post`` itself); ``free``
    gives a held response's buffer back to the pool.
    """

    def __init__(self, post: Callable[[Message], bool],
                 free: Callable[[Handle], object]) -> None:
        self._post = post
        self._free = free
        self._lanes: dict[int, _Lane] = {}

    def ticket(self, conn_id: int) -> int:
        """The next request of ``conn_id`` is dispatched: its ticket."""
        lane = self._lanes.get(conn_id)
        if lane is None:
            lane = self._lanes[conn_id] = _Lane()
        ticket = lane.next_ticket
        lane.next_ticket += 1
        return ticket

    def unanswered(self, conn_id: int) -> int:
        """Tickets of ``conn_id`` whose answer was not given yet (held ones are given)."""
        lane = self._lanes.get(conn_id)
        if lane is None:
            return 0
        return lane.next_ticket - lane.next_out - len(lane.held)

    def answer(self, conn_id: int, ticket: int, message: Message) -> bool:
        """``message`` answers ``ticket``: posted now with the held answers that follow
        it, or held until the earlier tickets are answered.  False when a post failed
        (the channel is gone)."""
        lane = self._lanes.get(conn_id)
        if lane is None:  # forgotten (closed): the network process frees a late answer
            return self._post(message)
        if not lane.next_out <= ticket < lane.next_ticket or ticket in lane.held:
            raise ValueError(f"connection {conn_id}: no request waits for answer {ticket}")
        if ticket != lane.next_out:
            lane.held[ticket] = message
            return True
        ok = self._post(message)
        lane.next_out += 1
        while lane.next_out in lane.held:
            ok = self._post(lane.held.pop(lane.next_out)) and ok
            lane.next_out += 1
        if lane.next_out == lane.next_ticket:
            del self._lanes[conn_id]  # nothing outstanding: hold no state
        return ok

    def forget(self, conn_id: int) -> int:
        """``conn_id`` is gone: drop its state, free the buffers of its held responses;
        how many were freed."""
        lane = self._lanes.pop(conn_id, None)
        if lane is None:
            return 0
        freed = 0
        for message in lane.held.values():
            if message[0] == RESPONSE:
                self._free(message[2])
                freed += 1
        return freed

    def forget_all(self) -> int:
        """Every connection is gone (the network process died): :meth:`forget` each."""
        return sum(self.forget(conn_id) for conn_id in list(self._lanes))
