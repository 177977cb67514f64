"""Failed logins per user and per address over a window, and the lockouts they earn.

Password guessing must cost something.  Each server (a broker's main process, the
controller) keeps one :class:`LoginFailures`; its SASL sessions (:mod:`broker.auth`) ask
:meth:`LoginFailures.refusal` before they judge a login and call
:meth:`LoginFailures.record` after one failed:

- a user name with ``max_failed_logins_per_user`` failures, or an address with
  ``max_failed_logins_per_address``, counted from the first failure of a window of
  ``failed_login_window_ms`` (a new window starts with the first failure after the last
  one ended), is locked out for ``failed_login_lockout_ms``: its logins fail whatever
  the password, answered exactly like a wrong password (the client learns nothing, not
  even that it is locked out), and one warning is logged when the lockout starts;
- failures during a lockout are not counted (a lockout ends on time), and a success
  resets nothing;
- names that do not exist count like names that do (a lockout that only real users
  could earn would tell which names exist); a name longer than 64 characters (longer
  than any user's) is counted under its SHA-256, so a table entry is small;
- the tables are bounded: at most ``max_failed_login_entries`` names and as many
  addresses.  An entry is forgotten once its window and lockout are over; when a table
  is full the entry whose last failure is oldest is forgotten (its count, and a lockout
  it may still be serving, end early), so an attacker who sprays names from many
  addresses can shorten lockouts but never grow memory.

Addresses that many clients share are not counted as addresses
(``failed_login_shared_addresses``, default ``127.0.0.1,::1``: every client on the
broker's machine, a local cluster's included, comes from there, so one misconfigured
local client retrying a wrong password would otherwise lock every local application
out); their failures still count per user.  Add a NAT gateway's address the same way.

The caller decides what is counted: brokers' own logins (``broker-<id>``, keys derived
from the cluster secret, hopeless to guess) are left out by :mod:`broker.auth`, so a
client guessing them from a broker's address (every node of a local cluster shares
127.0.0.1) can lock out neither the broker nor the address for it.

Time comes from an injected :class:`~timer.clock.Clock` (milliseconds): tests drive it
by hand.  Costs: O(1) per call (dictionary operations; forgetting expired entries is
amortized O(1)); memory O(``max_failed_login_entries``) per table.  Not thread-safe:
one event loop owns it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
from collections import OrderedDict
from dataclasses import dataclass

from clients.protocol.errors import InvalidConfigError
from timer.clock import Clock

log = logging.getLogger(__name__)

MAX_NAME_CHARS = 64  # longer names are counted under a digest


@dataclass
class _Window:
    """One name's or address's failures: since ``start_ms``, ``count`` of them; locked
    out until ``locked_until_ms`` (0: not locked); the last failure at ``last_ms``."""

    start_ms: int
    count: int
    last_ms: int
    locked_until_ms: int = 0


@dataclass(frozen=True)
class LoginFailureLimits:
    """The bounds, config keys of the same names on the broker and the controller (the
    delay and its bound are the servers' business; kept here to validate them once)."""

    connection_failed_authentication_delay_ms: int = 100  # Kafka's name and default
    max_delayed_authentication_failures: int = 100
    max_failed_logins_per_user: int = 10
    max_failed_logins_per_address: int = 30
    failed_login_window_ms: int = 60_000
    failed_login_lockout_ms: int = 60_000
    max_failed_login_entries: int = 10_000
    # addresses many clients share (every client on this machine comes from 127.0.0.1):
    # counted per user only, never locked out as an address
    failed_login_shared_addresses: str = "127.0.0.1,::1"

    @property
    def shared_addresses(self) -> frozenset[str]:
        return frozenset(a.strip() for a in self.failed_login_shared_addresses.split(",")
                         if a.strip())

    @classmethod
    def of(cls, config: object) -> LoginFailureLimits:
        """The limits of a broker or controller config (fields of the same names)."""
        return cls(**{name: getattr(config, name) for name in cls.__dataclass_fields__})

    def validate(self, connections_max_idle_ms: int) -> LoginFailureLimits:
        for address in self.shared_addresses:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise InvalidConfigError(
                    f"failed_login_shared_addresses: {address!r} is not an IP address"
                ) from None
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, str):
                continue
            if value <= 0 and name != "connection_failed_authentication_delay_ms":
                raise InvalidConfigError(f"{name} must be positive, got {value}")
        delay = self.connection_failed_authentication_delay_ms
        if not 0 <= delay < connections_max_idle_ms:
            raise InvalidConfigError(
                "connection_failed_authentication_delay_ms must be >= 0 and below "
                f"connections_max_idle_ms ({connections_max_idle_ms}), got {delay}")
        return self


class _Table:
    """Failures keyed by a name or an address, bounded (see the module docstring)."""

    def __init__(self, what: str, key: str, bound: int, limits: LoginFailureLimits) -> None:
        self.what = what  # "user" / "address", for the log
        self.key = key  # the config key of the bound, for the log
        self.bound = bound
        self.limits = limits
        self.entries: OrderedDict[str, _Window] = OrderedDict()  # oldest last failure first

    def locked(self, name: str, now_ms: int) -> bool:
        entry = self.entries.get(name)
        return entry is not None and entry.locked_until_ms > now_ms

    def record(self, name: str, now_ms: int) -> None:
        limits = self.limits
        self._forget_expired(now_ms)
        entry = self.entries.get(name)
        if entry is not None and entry.locked_until_ms > now_ms:
            return  # refused meanwhile: not counted, the lockout ends on time
        if entry is None or now_ms - entry.start_ms >= limits.failed_login_window_ms:
            if entry is None and len(self.entries) >= limits.max_failed_login_entries:
                self.entries.popitem(last=False)  # full: forget the oldest
            entry = self.entries[name] = _Window(now_ms, 0, now_ms)
        entry.count += 1
        entry.last_ms = now_ms
        self.entries.move_to_end(name)
        if entry.count >= self.bound:
            entry.locked_until_ms = now_ms + limits.failed_login_lockout_ms
            log.warning("%d failed logins for %s %r within %d ms (%s=%d): its logins are "
                        "refused for %d ms", entry.count, self.what, name,
                        now_ms - entry.start_ms, self.key, self.bound,
                        limits.failed_login_lockout_ms)
            entry.start_ms, entry.count = entry.locked_until_ms, 0  # a new window after

    def _forget_expired(self, now_ms: int) -> None:
        window = self.limits.failed_login_window_ms
        entries = self.entries
        while entries:
            name, entry = next(iter(entries.items()))
            if entry.locked_until_ms > now_ms or now_ms - entry.last_ms < window:
                return  # (a locked entry may hide expired ones behind it: they wait)
            del entries[name]


class LoginFailures:
    """Failed logins per user and per address; see the module docstring."""

    def __init__(self, limits: LoginFailureLimits, clock: Clock) -> None:
        self.limits = limits
        self.clock = clock
        self.users = _Table("user", "max_failed_logins_per_user",
                            limits.max_failed_logins_per_user, limits)
        self.addresses = _Table("address", "max_failed_logins_per_address",
                                limits.max_failed_logins_per_address, limits)
        self.shared = limits.shared_addresses  # counted per user only
        self.recorded = 0  # failed logins so far (broker.metrics)

    def refusal(self, user: str | None, address: str) -> str | None:
        """Why a login of ``user`` (None: no name given yet) from ``address`` must fail
        whatever its password (for the server's log), or None."""
        now_ms = self.clock.now_ms()
        if address not in self.shared and self.addresses.locked(address, now_ms):
            return f"address {address} is locked out (max_failed_logins_per_address)"
        if user is not None and self.users.locked(_key(user), now_ms):
            return f"user {_key(user)!r} is locked out (max_failed_logins_per_user)"
        return None

    def record(self, user: str | None, address: str) -> None:
        """One failed login of ``user`` (None: the exchange failed before it named one)
        from ``address``."""
        now_ms = self.clock.now_ms()
        self.recorded += 1
        if address not in self.shared:
            self.addresses.record(address, now_ms)
        if user is not None:
            self.users.record(_key(user), now_ms)


def _key(user: str) -> str:
    if len(user) <= MAX_NAME_CHARS:
        return user
    return "sha256:" + hashlib.sha256(user.encode("utf-8", "replace")).hexdigest()
