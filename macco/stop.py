"""Stopping ``macco run`` on the first SIGINT (Ctrl-C) or SIGTERM.

The flow's stages run in worker threads and child processes (the temporary Prefect server, data-loader and Dask
workers): a ``KeyboardInterrupt`` in the main thread stopped none of them, the temporary server died with the
terminal's process group, and the stage went on working, then printed connection errors for minutes. The handler
here ends the whole run instead, at once and the way ``kill -9`` would: every table is written to a temporary folder
and renamed when complete, so what a stopped stage leaves is complete or absent, finished stages stay Cached and a
training run continues from its last checkpoint on the next ``macco run``."""
from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 3.0  # how long the run's child processes get to end on SIGTERM before SIGKILL


@contextmanager
def stop_on_signals(what: str):
    """Inside, the first SIGINT or SIGTERM ends this process and its child processes, printing one line; the
    handlers before are back after it."""
    def stop(signum, frame) -> None:
        name = signal.Signals(signum).name
        print(f"{what}: stopped by {name}: finished stages are kept; the stage in progress left no partial table "
              "(a training run continues from its last checkpoint): rerun the same command to go on",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        end_children()
        os._exit(128 + signum)

    before = {sig: signal.signal(sig, stop) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def end_children(grace: float = GRACE_S) -> list[int]:
    """SIGTERM to every process descended from this one and to the run's orphans (``orphans``), SIGKILL to those
    still there after ``grace`` seconds; returns their pids."""
    kids = descendants(os.getpid())
    kids += [p for p in orphans() if p not in kids]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in kids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue  # already gone
        deadline = time.monotonic() + grace
        while sig == signal.SIGTERM and time.monotonic() < deadline and any(alive(p) for p in kids):
            time.sleep(0.05)
    return kids


def descendants(pid: int) -> list[int]:
    """The pids of ``pid``'s children, theirs, and so on (Linux ``/proc``; none where there is no ``/proc``)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int(_stat(d)[1])
        except (OSError, IndexError, ValueError):  # ended while being read
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _stat(d: Path) -> list[str]:
    """``/proc/PID/stat``'s fields after the command name: state, ppid, pgrp, ..., starttime at index 19."""
    return (d / "stat").read_text().rsplit(")", 1)[1].split()


def orphans() -> list[int]:
    """Processes this run started whose parent ended first (Ctrl-C reaches the whole process group: a child that
    dies of it leaves its own children to init, out of ``descendants``' reach): same process group as this one,
    started after it, and not a child of this one's parent (a pipe's other end, ``macco run | tee``, is kept)."""
    me = _stat(Path("/proc/self"))
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            f = _stat(d)
        except (OSError, IndexError):  # ended while being read
            continue
        if f[2] == me[2] and int(d.name) != os.getpid() and f[1] != me[1] and int(f[19]) >= int(me[19]):
            out.append(int(d.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = _stat(Path("/proc") / str(pid))[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended (its parent, this process, has not waited for it)
