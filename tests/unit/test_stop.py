"""macco/stop.py: the first SIGINT / SIGTERM ends ``macco run`` and every process it started, with one line (#48 item
7: Ctrl-C killed the temporary Prefect server while the stage kept working, then minutes of connection errors)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from macco.stop import alive, descendants, stop_on_signals

# a process that starts a child and a grandchild, then waits inside stop_on_signals as `macco run` does
CHILD = """
import subprocess, sys, time
from macco.stop import stop_on_signals
kids = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60; wait"])
with stop_on_signals("macco run"):
    print("ready", flush=True)
    time.sleep(60)
print("not stopped", flush=True)
"""


def _gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="child processes are found through /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_first_signal_ends_the_process_and_its_children_with_one_line(sig):
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    deadline = time.monotonic() + 10
    while len(descendants(proc.pid)) < 3 and time.monotonic() < deadline:  # sh and its two sleeps
        time.sleep(0.02)
    kids = descendants(proc.pid)
    assert len(kids) >= 3
    t0 = time.monotonic()
    proc.send_signal(sig)  # to the process alone (SIGTERM from a supervisor): its children are its to end
    out, err = proc.communicate(timeout=20)
    assert time.monotonic() - t0 < 10 and proc.returncode == 128 + sig
    assert "not stopped" not in out
    [line] = err.strip().splitlines()
    assert line.startswith(f"macco run: stopped by {signal.Signals(sig).name}: finished stages are kept")
    assert _gone(kids, 5), [p for p in kids if alive(p)]


def test_the_handlers_before_are_back_after_the_run():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with stop_on_signals("macco run"):
        assert signal.getsignal(signal.SIGINT) not in before
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


# a process whose child ends at once, leaving a grandchild to init (as a child killed by the terminal's Ctrl-C does)
ORPHANING = """
import subprocess, sys, time
from macco.stop import stop_on_signals
subprocess.run(["sh", "-c", "sleep 60 > /dev/null 2>&1 & echo $!"], stdout=open(sys.argv[1], "w"), check=True)
with stop_on_signals("macco run"):
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="child processes are found through /proc (Linux)")
def test_a_process_the_run_started_whose_parent_died_first_is_ended_too(tmp_path):
    """Seen in the e2e Ctrl-C test: a process of the run outlived it (its parent had died of the group's SIGINT)."""
    pidfile = tmp_path / "pid"
    proc = subprocess.Popen([sys.executable, "-c", ORPHANING, str(pidfile)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    orphan = int(pidfile.read_text())
    assert alive(orphan) and orphan not in descendants(proc.pid)  # out of reach of the children's walk
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGINT
    assert _gone([orphan], 5)
