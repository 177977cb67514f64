"""The processes ``minikafka cluster`` starts: spawning them, telling whether one still
runs and is the one started (not a later process that reuses its PID), ending them by
signal, and reaping them.

A process starts in its own session (a terminal's Ctrl-C does not reach it), its output
appended to its log file, with ``PYTHONPATH`` set to the tree holding ``broker/``
(:data:`SOURCE_ROOT`).  Only a process whose command line is the state file's is ever
signalled (:func:`is_ours`).  :func:`end_process` waits up to its timeout, then SIGKILLs,
and waits for the process's own children too (a broker's network processes).

Processes started by this interpreter (tests drive the launcher in-process) are kept
until reaped, so no zombie is left and Popen does not warn that they are still running;
at interpreter exit those something else killed are reaped.

Costs: a few ``/proc`` reads per check (psutil).  Not thread-safe: one launcher command
at a time.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from broker.cluster.state import ProcessInfo

SOURCE_ROOT = str(Path(__file__).resolve().parents[2])  # the tree holding broker/


# Processes started by this interpreter (tests drive the launcher in-process): kept so
# they can be reaped, and so Popen does not warn that they are still running.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@atexit.register
def _reap_exited_children() -> None:
    """At interpreter exit, collect the status of children something else killed (a
    fault injector or a test signalling a PID from the state file): Popen warns
    "subprocess N is still running" for any child never waited for, also a dead one.
    A child still running is left alone (and warned about: a process someone leaked)."""
    for child in list(_CHILDREN.values()):
        child.poll()


def is_running(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def is_ours(info: ProcessInfo) -> bool:
    """``info``'s process runs and is the one the launcher started (same command line),
    not a later process that reuses a stale PID from the state file: only such a process
    is signalled."""
    if not is_running(info.pid):
        return False
    try:
        return psutil.Process(info.pid).cmdline() == info.argv
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def spawn(info: ProcessInfo) -> None:
    with open(info.log_file, "ab") as log:
        env = dict(os.environ, PYTHONPATH=SOURCE_ROOT + os.pathsep + os.environ.get(
            "PYTHONPATH", ""))
        proc = subprocess.Popen(info.argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    info.pid = proc.pid
    _CHILDREN[proc.pid] = proc  # reaped by end_process when this process stops it


def _wait_gone(proc: psutil.Process, timeout_s: float) -> bool:
    """Wait until ``proc`` has exited; a zombie counts as exited.

    ``psutil.Process.wait`` cannot reap a process this process did not start, and a
    zombie (its parent has not reaped it yet) would look alive until the timeout.
    """
    if proc.pid in _CHILDREN:
        try:
            _CHILDREN[proc.pid].wait(timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout_s
    while is_running(proc.pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)  # polling another process's exit; nothing to wait on
    return True


def _reap(pid: int) -> None:
    """Collect the exit status of a process this process started (no zombie left)."""
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        child.wait(10)


def end_process(info: ProcessInfo, sig: signal.Signals, timeout_s: float) -> None:
    if not is_ours(info):
        _reap(info.pid)
        return
    proc = psutil.Process(info.pid)
    children = proc.children(recursive=True)
    if sig == signal.SIGTERM:
        os.kill(info.pid, signal.SIGCONT)  # a paused process cannot shut down
    os.kill(info.pid, sig)
    if not _wait_gone(proc, timeout_s):
        proc.kill()
        if not _wait_gone(proc, 10):
            raise RuntimeError(f"process {info.pid} did not exit after SIGKILL")
    _reap(info.pid)
    for child in children:
        try:
            if not _wait_gone(child, 5):
                child.kill()
        except psutil.NoSuchProcess:
            pass
