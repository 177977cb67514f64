"""The main process's request path around the handlers: who is logged in, and answers out.

- :mod:`~broker.requests.logins` - ``ConnectionLogins``: SASL sessions per connection,
  peer addresses, the internal listener's login deadlines, failed logins answered late;
- :mod:`~broker.requests.responses` - ``ResponseSender``: answers encoded into pool
  buffers and handed to the network processes, the error answer of a failed handler;
- :mod:`~broker.requests.response_parking` - ``ResponseParking``: responses waiting for
  pool memory without blocking the loop (sans-IO);
- :mod:`~broker.requests.respond` - ``Respond[T]``: the answer callback the handlers and
  the coordinators (:mod:`broker.group`) answer through.

:mod:`broker.server` (the wiring) owns one of each and dispatches the requests.
Imports: ``broker.auth``, ``broker.login_failures``, ``broker.network`` (the channel's
main side), ``broker.handlers.common`` (file regions) and the client foundations; never
:mod:`broker.core`.  Not thread-safe: the main event loop owns them.  Exports nothing:
import from the defining module.
"""
