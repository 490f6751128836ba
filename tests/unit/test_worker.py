"""flows/worker.py: the deployment verbs (``make worker``, ``make deploy``) say in one line, exit 2, that no Prefect
server is set or answers; the worker stops on the first SIGTERM (and exits even if its teardown hangs)."""
from __future__ import annotations

import http.server
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flows.worker import server_problem

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path, **over) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return {**env, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PYTHONPATH": str(REPO), **over}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("verb", ["worker", "deploy"])
def test_a_missing_api_url_is_one_line_and_exit_2(tmp_path, verb):
    argv = [] if verb == "worker" else ["--check", "deploy"]
    r = subprocess.run([sys.executable, "-m", "flows.worker", *argv], env=_env(tmp_path), cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"make {verb}: PREFECT_API_URL is not set: a deployment needs a Prefect server; "
                                     "start one (make server) and export PREFECT_API_URL=http://127.0.0.1:4200/api"]


def test_an_unreachable_server_is_one_line_and_exit_2(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/api"
    r = subprocess.run([sys.executable, "-m", "flows.worker"], env=_env(tmp_path, PREFECT_API_URL=url),
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith(f"make worker: PREFECT_API_URL={url}: no Prefect server answers there (")


def test_any_http_answer_is_a_server_and_a_bad_url_is_named():
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/api/health" else 404)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert server_problem(f"http://127.0.0.1:{port}/api") is None
        assert server_problem(f"http://127.0.0.1:{port}/elsewhere") is None  # 404: a server all the same
    finally:
        server.shutdown()
    assert "is not an http(s) URL" in server_problem("127.0.0.1:4200/api")


WORK = """
import asyncio, sys
from flows.worker import run_until_signal

async def work():
    print("ready", flush=True)
    while True:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            if {stubborn}:
                continue  # a teardown that never ends
            raise

sys.exit(run_until_signal(work, grace_s=1.5))
"""


@pytest.mark.parametrize("stubborn", [False, True])
def test_the_worker_stops_on_the_first_sigterm(tmp_path, stubborn):
    """The same handler ``make worker`` runs under (``run_until_signal``): one SIGTERM stops it — at once when the
    work winds down on cancellation (exit 0), after the grace period when it does not (exit 143)."""
    proc = subprocess.Popen([sys.executable, "-c", WORK.format(stubborn=stubborn)], env=_env(tmp_path), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    out = proc.stdout.read()
    assert "worker: SIGTERM received, stopping" in out
    if stubborn:
        assert rc == 128 + signal.SIGTERM and 1.0 < took < 15
    else:
        assert rc == 0 and "worker: stopped" in out and took < 10


def test_the_make_targets_go_through_the_check():
    makefile = (REPO / "Makefile").read_text()
    worker = re.search(r"^worker:.*\n\t(.*)", makefile, flags=re.M).group(1)
    deploy = re.search(r"^deploy:.*\n\t(.*)", makefile, flags=re.M).group(1)
    assert "-m flows.worker --pool macco-local" in worker and "prefect worker start" not in worker
    assert deploy.startswith("@$(PY) -m flows.worker --check deploy && ") and "deploy --all" in deploy
