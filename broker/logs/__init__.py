"""How the broker's processes log what they decide.

- ``rate_limit``: :class:`RateLimitedLog`, a line per key at most once per interval,
  then how many were suppressed (sans-IO, injected clock).

Which process logs what (docs/broker.md, "Logs"): the controller logs each fencing,
unfencing, registration and election it decides, once, at INFO; a broker logs its ISR
proposals and their answers, its recovery decisions, the transaction markers it resends
and the KIP-890 verifications it refuses, through a :class:`RateLimitedLog` wherever the
same line can repeat.

May import ``timer.clock`` only.  Nothing is exported here: import from the defining
module.
"""
