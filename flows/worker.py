"""The deployment verbs' side of Prefect: ``make worker`` and ``make deploy`` (``python -m flows.worker``).

- Both need a Prefect server: a missing ``PREFECT_API_URL`` (neither in the environment nor in the Prefect profile)
  or one where no server answers is one line and exit 2 (``server_problem``), not Prefect's tracebacks.
- The worker is Prefect's process worker (``prefect worker start --pool macco-local``) run in this process, under a
  SIGTERM handler that stops it on the first signal (``stop_on_signals``): Prefect's own CLI turns the first SIGTERM
  into a SIGINT to itself and only a second one kills it, so a service manager's single SIGTERM (``kill``, systemd,
  Kubernetes, ``make`` passing one on) left it running. The first SIGTERM or SIGINT cancels the worker's loops (a
  flow run it started gets SIGTERM from Prefect's process cleanup; run it again, or ``prefect flow-run retry`` it:
  its finished stages come back Cached); should that not finish within ``GRACE_S`` seconds, the process exits.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable

LOCAL_API = "http://127.0.0.1:4200/api"  # `make server`'s
POOL = "macco-local"  # the work pool of prefect.yaml's deployments
GRACE_S = 10.0  # after the first SIGTERM: the most the worker's teardown may take before the process exits


def configured_api_url() -> str | None:
    """``PREFECT_API_URL`` as Prefect reads it (the environment, then the active profile), or None."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def server_problem(url: str | None, timeout: float = 5.0) -> str | None:
    """Why no Prefect server can be used at ``url`` (one line), or None. Any HTTP answer from ``<url>/health`` is a
    server (Prefect Cloud answers a health request without credentials with an error status); no answer is not."""
    if not url:
        return (f"PREFECT_API_URL is not set: a deployment needs a Prefect server; start one (make server) and "
                f"export PREFECT_API_URL={LOCAL_API}")
    if not url.startswith(("http://", "https://")):
        return f"PREFECT_API_URL={url} is not an http(s) URL (e.g. {LOCAL_API})"
    try:
        urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout).close()
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return (f"PREFECT_API_URL={url}: no Prefect server answers there ({reason}); start one (make server) or "
                f"export the URL of a running one")
    return None


def stop_on_signals(task: asyncio.Task, grace_s: float = GRACE_S,
                    say: Callable[[str], None] = lambda line: print(line, flush=True)) -> None:
    """On the first SIGTERM (or SIGINT): cancel ``task`` (the worker's loops wind down), and exit the process after
    ``grace_s`` seconds should they not have. Installed on the running loop."""
    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        say(f"worker: {signal.Signals(signum).name} received, stopping")
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(s)
        signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))  # a second one: at once
        timer = threading.Timer(grace_s, os._exit, args=(128 + signum,))
        timer.daemon = True
        timer.start()
        task.cancel()

    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop, s)


def run_until_signal(work: Callable[[], Awaitable[None]], grace_s: float = GRACE_S) -> int:
    """Run ``work()`` until it returns (0) or a SIGTERM / SIGINT stops it (0: stopped as asked)."""
    async def main() -> int:
        stop_on_signals(asyncio.current_task(), grace_s)
        try:
            await work()
        except asyncio.CancelledError:
            print("worker: stopped", flush=True)
        return 0

    return asyncio.run(main())


def serve(pool: str, url: str) -> Callable[[], Awaitable[None]]:
    """The process worker of ``pool`` against the server at ``url`` (as ``prefect worker start --pool``)."""
    async def work() -> None:
        from prefect.settings import PREFECT_API_URL, PREFECT_WORKER_HEARTBEAT_SECONDS, temporary_settings
        from prefect.workers.process import ProcessWorker

        with temporary_settings(updates={PREFECT_API_URL: url}):
            worker = ProcessWorker(work_pool_name=pool,
                                   heartbeat_interval_seconds=int(PREFECT_WORKER_HEARTBEAT_SECONDS.value()))
            await worker.start(printer=lambda *a, **_: print(*a, flush=True))

    return work


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.worker", description=__doc__.splitlines()[0])
    ap.add_argument("--pool", default=POOL, help="the process work pool to serve (default: %(default)s)")
    ap.add_argument("--check", metavar="VERB", help="only check the server for VERB (make deploy) and exit")
    args = ap.parse_args(argv)
    url = configured_api_url()
    problem = server_problem(url)
    if problem:
        print(f"make {args.check or 'worker'}: {problem}", file=sys.stderr)
        return 2
    if args.check:
        return 0
    return run_until_signal(serve(args.pool, url))


if __name__ == "__main__":
    sys.exit(main())
