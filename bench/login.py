"""Password guessing and user-name enumeration (issue 30, items 4 and 5), measured on a
real broker.

A standalone broker (``python -m broker start``, ``client_auth_required=true``, a users
file with ``alice`` and ``bob``; ``--tls`` for TLS on its port with throwaway
certificates; ``--override key=value`` for any other broker key) is started here and
stopped by PID at the end.  Raw SCRAM-SHA-256 over SaslHandshake v1 + SaslAuthenticate
v2 (``tests/broker/raw_kafka.py``), from three loopback addresses so that the phases do
not count against each other:

1. enumeration (127.0.0.1): ``--samples`` fresh connections, alternately for ``alice``
   (a user) and ``mallory`` (no such user), each timed from sending the client-first
   message to the server-first answer (medians, ms), and the distinct salts seen per
   name (a user: 1; an unknown name: 1 now, one per attempt before);
2. guessing on one connection (127.0.0.2): wrong proofs for ``alice`` on one connection
   for ``--seconds``, until the broker closes it (answered guesses per second);
3. guessing on new connections (127.0.0.3): one wrong login for ``bob`` per new
   connection (TLS handshake included with ``--tls``) for ``--seconds``, one client at
   a time (answered guesses per second), then whether ``bob``'s right password still
   logs in from that address (False: the burst locked the name or the address out).

Writes ``bench/results/login.json`` and ``.png`` (``--name`` to keep another run beside
it, e.g. ``--name login_old`` on older code: the bench runs unchanged on a checkout
without the fix, e.g. ``git worktree add --detach /tmp/old 0ac3ad3``, copy this file
there and run it there).  Run: ``python3 -m bench.login`` (~25 s; ``--tls`` for the
TLS figures).  One run at a time.
"""

from __future__ import annotations

import argparse
import base64
import json
import socket
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import plotting
from bench.cluster_lifecycle import machine_info
from broker.users import add_user
from clients.protocol.api_keys import ApiKey
from clients.protocol.scram import ScramClient
from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import call

RESULTS = Path(__file__).resolve().parent / "results"
PASSWORD = "the right password"
MECHANISM = "SCRAM-SHA-256"


def connect(port: int, source: str, tls: ssl.SSLContext | None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(source, 0))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock if tls is None else tls.wrap_socket(sock, server_hostname="127.0.0.1")


def first_answer(sock: socket.socket, user: str) -> tuple[float, bytes, bytes, ScramClient]:
    """Handshake, then the client-first message: (ms to its answer, the answer, its salt,
    the client, which has a wrong password)."""
    assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})["error_code"] == 0
    client = ScramClient(MECHANISM, user, b"a wrong guess")
    started = time.perf_counter()
    answer = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
    took_ms = (time.perf_counter() - started) * 1000
    assert answer["error_code"] == 0, answer
    server_first = bytes(answer["auth_bytes"])
    attrs = dict(p.split("=", 1) for p in server_first.decode().split(","))
    return took_ms, server_first, base64.b64decode(attrs["s"]), client


def guess(sock: socket.socket, user: str) -> bool:
    """One wrong login on ``sock`` (a proof from a wrong password, PBKDF2 on this side as
    a guesser must); True when the broker answered it (a failure)."""
    _ms, server_first, _salt, client = first_answer(sock, user)
    final = call(sock, ApiKey.SASL_AUTHENTICATE, 2,
                 {"auth_bytes": client.final(server_first)})
    return bool(final["error_code"])


def logs_in(port: int, source: str, tls: ssl.SSLContext | None, user: str) -> bool:
    try:
        with connect(port, source, tls) as sock:
            assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})[
                "error_code"] == 0
            client = ScramClient(MECHANISM, user, PASSWORD.encode())
            first = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
            final = call(sock, ApiKey.SASL_AUTHENTICATE, 2,
                         {"auth_bytes": client.final(bytes(first["auth_bytes"]))})
            return final["error_code"] == 0
    except (OSError, AssertionError):
        return False


def enumeration(port: int, tls: ssl.SSLContext | None, samples: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"alice": [], "mallory": []}
    salts: dict[str, set[bytes]] = {"alice": set(), "mallory": set()}
    for i in range(samples):
        user = "alice" if i % 2 == 0 else "mallory"
        with connect(port, "127.0.0.1", tls) as sock:
            took_ms, _answer, salt, _client = first_answer(sock, user)
        times[user].append(took_ms)
        salts[user].add(salt)
    return {"known_user_ms_median": statistics.median(times["alice"]),
            "unknown_user_ms_median": statistics.median(times["mallory"]),
            "samples_each": samples // 2,
            "distinct_salts_known_user": len(salts["alice"]),
            "distinct_salts_unknown_user": len(salts["mallory"])}


def one_connection(port: int, tls: ssl.SSLContext | None, seconds: float) -> dict[str, Any]:
    answered = 0
    started = time.monotonic()
    closed = False
    with connect(port, "127.0.0.2", tls) as sock:
        while time.monotonic() - started < seconds:
            try:
                answered += guess(sock, "alice")
            except (OSError, AssertionError):  # closed by the broker (EOF, reset)
                closed = True
                break
    took = time.monotonic() - started
    return {"guesses_answered": answered, "seconds": took,
            "guesses_per_second": answered / took, "closed_by_broker": closed}


def new_connections(port: int, tls: ssl.SSLContext | None, seconds: float) -> dict[str, Any]:
    answered = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            with connect(port, "127.0.0.3", tls) as sock:
                answered += guess(sock, "bob")
        except (OSError, AssertionError):
            pass
    took = time.monotonic() - started
    return {"guesses_answered": answered, "seconds": took,
            "guesses_per_second": answered / took,
            "right_password_logs_in_after": logs_in(port, "127.0.0.3", tls, "bob")}


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-login-") as tmp:
        root = Path(tmp)
        users = root / "users.scram"
        for name in ("alice", "bob"):
            add_user(users, name, PASSWORD.encode())
        overrides: dict[str, object] = {"client_auth_required": "true",
                                        "sasl_users_file": users}
        tls: ssl.SSLContext | None = None
        if args.tls:
            from tests.tls_certs import make_certs  # needs cryptography (the test extra)

            certs = make_certs(root / "certs")
            overrides.update(ssl_certfile=certs.server_cert, ssl_keyfile=certs.server_key)
            tls = ssl.create_default_context(cafile=str(certs.ca))
        for pair in args.override:
            key, _, value = pair.partition("=")
            overrides[key] = value
        with BrokerProcess(root / "data", overrides=overrides) as broker:
            return {"enumeration": enumeration(broker.port, tls, args.samples),
                    "one_connection": one_connection(broker.port, tls, args.seconds),
                    "new_connections": new_connections(broker.port, tls, args.seconds)}


def plot(path: Path, result: dict[str, Any], title: str) -> bool:
    drawn = plotting.figure(ncols=3, figsize=(14, 4))
    if drawn is None:
        return False
    plt, fig, (ax1, ax2, ax3) = drawn
    enum = result["enumeration"]
    values = [enum["known_user_ms_median"], enum["unknown_user_ms_median"]]
    ax1.bar(["alice (a user)", "mallory (unknown)"], values)
    for x, v in enumerate(values):
        ax1.annotate(f"{v:.2f} ms", (x, v), ha="center", va="bottom")
    ax1.set_ylabel("ms to the server-first answer, median")
    ax1.set_title(f"salts seen: {enum['distinct_salts_known_user']} vs "
                  f"{enum['distinct_salts_unknown_user']} in {enum['samples_each']} tries")
    one = result["one_connection"]
    ax2.bar(["answered"], [one["guesses_answered"]])
    ax2.annotate(f"{one['guesses_answered']} in {one['seconds']:.2f} s", (0, 0),
                 ha="center", va="bottom")
    ax2.set_ylabel("wrong proofs answered on one connection")
    ax2.set_title("closed by the broker" if one["closed_by_broker"]
                  else "still open at the end")
    new = result["new_connections"]
    ax3.bar(["new connections"], [new["guesses_per_second"]])
    ax3.annotate(f"{new['guesses_per_second']:.1f}/s", (0, new["guesses_per_second"]),
                 ha="center", va="bottom")
    ax3.set_ylabel("wrong logins answered per second, one client")
    ax3.set_title("right password after: " + ("accepted" if new["right_password_logs_in_after"]
                                               else "refused (locked out)"))
    fig.suptitle(title)
    return plotting.save(plt, fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=400,
                        help="client-first messages timed, half per name")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="length of each guessing phase")
    parser.add_argument("--tls", action="store_true", help="TLS on the broker's port")
    parser.add_argument("--override", action="append", default=[],
                        help="another broker config key=value")
    parser.add_argument("--name", default="")
    args = parser.parse_args()
    result = run(args)
    name = args.name or ("login_tls" if args.tls else "login")
    result["settings"] = {k: v for k, v in vars(args).items() if k != "name"}
    result["client"] = ("raw sockets (tests/broker/raw_kafka.py): SaslHandshake v1, "
                        "SaslAuthenticate v2, SCRAM-SHA-256" + (", TLS" if args.tls else ""))
    result["machine"] = machine_info()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    title = ("SCRAM logins on a broker with client_auth_required"
             + (" over TLS" if args.tls else "") + f" ({name})")
    plotted = plot(RESULTS / f"{name}.png", result, title)
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    print(f"wrote {RESULTS / (name + '.json')}" + (" and .png" if plotted else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
