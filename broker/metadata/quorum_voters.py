"""The controller quorum's voters as a broker is told them: Kafka's
``controller.quorum.voters`` format, ``id@host:port`` separated by commas
(``"1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"``).

A broker's ``controller_address`` holds either this list or today's single
``host:port`` (the one-voter form: one voter whose id the broker does not know,
:data:`UNKNOWN_VOTER_ID`).  :func:`parse_quorum_voters` reads both; :func:`format_quorum_voters`
writes the list (the launcher passes it to every controller and broker).

Contract: ids are distinct non-negative ints, ports 1..65535, hosts non-empty (an IPv6
host in brackets, ``1@[::1]:9093``); at most :data:`MAX_VOTERS` voters (a quorum of 1,
3 or 5 in practice; the bound keeps a hostile config from making a broker open
thousands of connections).  A bad list raises :class:`InvalidConfigError` naming the
entry.  Costs: O(length of the string).  Pure, thread-safe (no state).
"""

from __future__ import annotations

from dataclasses import dataclass

from clients.protocol.errors import InvalidConfigError

__all__ = ["MAX_VOTERS", "UNKNOWN_VOTER_ID", "VoterAddress", "format_quorum_voters",
           "parse_quorum_voters"]

MAX_VOTERS = 9
UNKNOWN_VOTER_ID = -1  # the one-voter form ``host:port`` names no id


@dataclass(frozen=True)
class VoterAddress:
    """One voter: its node id and the address its controller listens on."""

    voter_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _host_port(text: str, entry: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise InvalidConfigError(f"controller voter {entry!r}: expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if not 0 < port < 65536 or not host:
        raise InvalidConfigError(f"controller voter {entry!r}: bad host or port")
    return host, port


def parse_quorum_voters(text: str) -> tuple[VoterAddress, ...]:
    """The voters of ``id@host:port,...``, or the one voter of ``host:port``."""
    text = text.strip()
    if not text:
        raise InvalidConfigError("controller voters: empty")
    if "@" not in text and "," not in text:
        return (VoterAddress(UNKNOWN_VOTER_ID, *_host_port(text, text)),)
    entries = [e.strip() for e in text.split(",")]
    if len(entries) > MAX_VOTERS:
        raise InvalidConfigError(f"controller voters: {len(entries)} voters, at most "
                                 f"{MAX_VOTERS}")
    voters: list[VoterAddress] = []
    for entry in entries:
        id_text, sep, address = entry.partition("@")
        if not sep or not id_text.isdigit():
            raise InvalidConfigError(f"controller voter {entry!r}: expected id@host:port")
        voter = VoterAddress(int(id_text), *_host_port(address, entry))
        if any(v.voter_id == voter.voter_id for v in voters):
            raise InvalidConfigError(f"controller voter id {voter.voter_id} named twice")
        voters.append(voter)
    return tuple(voters)


def format_quorum_voters(voters: tuple[VoterAddress, ...] | list[VoterAddress]) -> str:
    """``id@host:port,...`` (Kafka's ``controller.quorum.voters``)."""
    return ",".join(f"{v.voter_id}@{v.address}" for v in voters)
