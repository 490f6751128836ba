"""The GPU run: one entry point for the lent machine, with that machine's own Python (bench/gpu/README.md).

    python3 bench/gpu/run.py                      # on the lent machine, from the repository root
    python bench/gpu/run.py --tiny --device cpu   # the same code at tiny sizes, on a CPU (tests/e2e/test_gpu_script.py)

1. ``install``: the carried wheels (``make gpu-wheels``: bench/gpu/.carry/wheels) go into a private ``--target``
   directory with ``pip install --no-index --no-deps``; the machine's site-packages are never touched. That
   directory, the repository, tests/ and bench/ go on PYTHONPATH (the project is not pip-installed).
2. Each section runs in its own child process under a time box (its share of ``--budget``), so a hung or failing
   section costs only its box: what it measured before then is kept, and the rest is reported as skipped with the
   reason. Sections: env, train (eager), compile, loader, ground, eval, e2e (``bench/gpu/sections.py``).
3. The markdown goes to ``--out`` (default ``$OUT/gpu_results.md``, else bench/gpu_results.md, which
   ``make bench`` folds into bench/results.md) and to stdout; every raw row beside it as ``gpu_results.json``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # loaded by file (tests) rather than run as a script: its siblings importable
    sys.path.insert(0, str(HERE))

from gpu_report import ORDER, TITLES, render, section_rows  # noqa: E402,F401 (TITLES: API) the results' layout

REPO = HERE.parents[1]
CARRY = HERE / ".carry"
BOXES = {"full": {"install": 60, "env": 40, "train": 90, "compile": 150, "loader": 60, "ground": 90, "eval": 40,
                  "e2e": 90},
         "tiny": {"install": 60, "env": 30, "train": 45, "compile": 45, "loader": 30, "ground": 45, "eval": 30,
                  "e2e": 60}}
BUDGET = {"full": 470, "tiny": 150}
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}


def log(msg: str) -> None:
    print(f"[gpu] {msg}", file=sys.stderr, flush=True)


# ---- install ------------------------------------------------------------------------------------------------
def install(wheel_dir: str | Path, target: str | Path, python: str = sys.executable, timeout: float = 120) -> dict:
    """Install every wheel of ``wheel_dir`` into ``target`` with ``python``'s pip: no index, no dependencies
    (the machine's torch, timm, transformers ... stay), pip's config files ignored. pip refuses a wheel whose
    tags do not fit ``python`` (a cp311 wheel under 3.12, say). Returns what it installed."""
    wheel_dir, target = Path(wheel_dir), Path(target)
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not wheels:
        raise FileNotFoundError(f"no wheels in {wheel_dir} (run `make gpu-wheels` on the development machine)")
    target.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    cmd = [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheel_dir), "--no-deps",
           "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(target), *map(str, wheels)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"pip install failed (exit {r.returncode}): "
                           + " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:]))
    return {"wheels": [w.name for w in wheels], "mib": sum(w.stat().st_size for w in wheels) / 2 ** 20,
            "target": str(target), "seconds": time.perf_counter() - t0}


def pythonpath(target: str | Path | None) -> str:
    """The private target first, then the working tree (repository, tests/ for tests_support, bench/)."""
    parts = ([str(target)] if target else []) + [str(REPO), str(REPO / "tests"), str(REPO / "bench")]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


# ---- running the sections -----------------------------------------------------------------------------------
def run_sections(names: list[str], args, device: str, env: dict, timeout: float, workdir: Path) -> dict[str, dict]:
    """``names`` in one child process (its own process group, killed whole at ``timeout``); each section writes
    ``<name>.jsonl``. A section that raises is recorded and the next one runs; at the time box the section in
    progress is 'timeout' and the ones after it were not reached."""
    logf = workdir / f"{names[0]}.log"
    for n in names:
        (workdir / f"{n}.jsonl").unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--section", *names, "--result", str(workdir),
           "--device", device] + (["--tiny"] if args.tiny else [])
    cmd += ["--world", str(args.world)] if args.world else []
    t0 = time.perf_counter()
    rc, timed_out = 0, False
    with logf.open("w") as lf:
        p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            timed_out = True
        else:
            try:  # whatever the sections left running (loader workers, compile workers)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    wall = time.perf_counter() - t0
    tail = logf.read_text(errors="replace").strip().splitlines()[-40:]
    out, cut = {}, False
    for n in names:
        f = workdir / f"{n}.jsonl"
        lines = [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()] if f.exists() else []
        done = next((ln for ln in lines if ln["kind"] == "done"), None)
        err = next((ln for ln in lines if ln["kind"] == "error"), None)
        if done:
            status, reason = ("failed", err["message"]) if err else ("ok", "")
        elif cut or not lines:
            status = "not reached"
            reason = "an earlier section in the same process used up the time box" if timed_out else (
                f"the process ended (exit {rc}) before this section")
        elif timed_out:
            status, reason = "timeout", ""
        else:
            status, reason = "failed", f"the process ended (exit {rc}): {tail[-1] if tail else ''}"
        cut = cut or status in ("timeout", "not reached") or (status == "failed" and not done)
        out[n] = {"name": n, "status": status, "reason": reason[:400],
                  "seconds": done["seconds"] if done else None, "box": timeout,
                  "shared_with": names if len(names) > 1 else [],
                  "lines": [ln for ln in lines if ln["kind"] not in ("start", "done")]}
    out[names[0]]["log_tail"] = tail
    out[names[0]]["process_seconds"] = wall
    return out


def child(args) -> None:
    import traceback

    import sections

    size = sections.SIZES["tiny" if args.tiny else "full"]
    for name in args.section:
        emit = sections.Emit(Path(args.result) / f"{name}.jsonl")
        emit("start")
        t0 = time.perf_counter()
        try:
            fn = sections.SECTIONS[name]
            fn(emit, size, args.device, args.world) if name == "e2e" else fn(emit, size, args.device)
        except Exception as exc:  # recorded for the report; the next section still runs
            traceback.print_exc()
            emit("error", message=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        emit("done", seconds=time.perf_counter() - t0)


# ---- markdown -----------------------------------------------------------------------------------------------
# ---- main ---------------------------------------------------------------------------------------------------
def default_out() -> Path:
    return Path(os.environ["OUT"]) / "gpu_results.md" if os.environ.get("OUT") else REPO / "bench" / "gpu_results.md"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--carry", type=Path, default=CARRY,
                    help="the carried folder: wheels/ and world/ (make gpu-wheels)")
    ap.add_argument("--wheels", type=Path, help="the wheel folder (default: CARRY/wheels)")
    ap.add_argument("--world", type=Path, help="the prepared e2e world (default: CARRY/world, if present)")
    ap.add_argument("--target", type=Path, help="the private install directory (default: a new temporary one)")
    ap.add_argument("--no-install", action="store_true", help="use what the Python already imports")
    ap.add_argument("--out", type=Path, default=None, help="the markdown file (default $OUT/gpu_results.md)")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (macco-tiny/-micro, batch 8, 2 steps)")
    ap.add_argument("--budget", type=float, help="seconds for the whole run (default 470; --tiny 150)")
    ap.add_argument("--sections", nargs="+", choices=ORDER, default=list(ORDER))
    ap.add_argument("--one-process", action=argparse.BooleanOptionalAction, default=None,
                    help="the sections after env in one child process (default: only with --tiny; each section "
                         "then shares one time box, the sum of theirs)")
    ap.add_argument("--section", nargs="+", choices=ORDER, help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.section:
        child(args)
        return 0

    t_start = time.perf_counter()
    mode = "tiny" if args.tiny else "full"
    boxes, budget = BOXES[mode], args.budget or BUDGET[mode]
    deadline = t_start + budget
    out = args.out or default_out()
    wheels = args.wheels or args.carry / "wheels"
    if args.world is None and (args.carry / "world").is_dir():
        args.world = args.carry / "world"
    tmp = tempfile.TemporaryDirectory(prefix="macco-gpu-")
    workdir = Path(tmp.name)
    target = None
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "mode": mode,
            "budget": int(budget), "not_run": {}}
    if args.no_install:
        meta["install"] = {"note": "skipped (--no-install): the packages the Python already imports"}
    elif not wheels.is_dir():
        meta["install"] = {"note": f"skipped: no wheel folder at {wheels} (run `make gpu-wheels` and carry "
                                   "bench/gpu/.carry); using the packages the Python already imports"}
    else:
        target = args.target or workdir / "site"
        try:
            meta["install"] = install(wheels, target, timeout=boxes["install"])
            log(f"installed {len(meta['install']['wheels'])} wheels into {target}")
        except Exception as exc:  # reported; the sections then show what is missing
            meta["install"] = {"note": f"FAILED: {exc}"}
            target = None
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": pythonpath(target), "MACCO_GPU_SITE": str(target or "")}
    env.setdefault("PREFECT_HOME", str(workdir / "prefect"))
    if args.tiny:  # the dry run measures nothing: one thread keeps it fast on a loaded CPU (no OpenMP spinning)
        env.setdefault("OMP_NUM_THREADS", "1")
    from sections import SIZES  # light: no torch at import

    meta["loader_settings"] = len(SIZES[mode]["loader_workers"])
    device = "cpu" if args.device == "cpu" else args.device
    secs: dict[str, dict] = {}

    def left() -> float:
        return deadline - time.perf_counter() - 5

    log(f"env: box {boxes['env']} s")
    secs.update(run_sections(["env"], args, device, env, min(boxes["env"], left()), workdir))
    e = next(iter(section_rows(secs["env"], "env")), {})
    if args.device == "auto":
        device = "cuda" if e.get("cuda") else "cpu"  # also when env found no torch at all
    log(f"env: {secs['env']['status']}; device {device}")
    todo = [s for s in ORDER[1:] if s in args.sections]
    if "compile" in todo and device == "cpu":
        todo.remove("compile")
        meta["not_run"]["compile"] = ("torch.compile is measured on CUDA only (device cpu: Inductor's C++ build "
                                      "would take the time box)")
    groups = [todo] if (args.one_process if args.one_process is not None else args.tiny) and todo else \
        [[s] for s in todo]
    for group in groups:
        box = min(sum(boxes[s] for s in group), left())
        if box < 10:
            for s in group:
                meta["not_run"][s] = f"the run's budget of {budget:.0f} s was spent before this section"
            continue
        log(f"{', '.join(group)}: box {box:.0f} s")
        res = run_sections(group, args, device, env, box, workdir)
        secs.update(res)
        for s in group:
            log(f"{s}: {res[s]['status']}" + (f" in {res[s]['seconds']:.0f} s" if res[s]["seconds"] else "")
                + (f" ({res[s]['reason']})" if res[s]["reason"] else ""))
    for name in ORDER:
        if name not in secs and name not in meta["not_run"]:
            meta["not_run"][name] = "not selected (--sections)"
    meta["wall_s"] = time.perf_counter() - t_start
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "sections": secs}, indent=1, default=str))
    md = render(secs, meta)
    out.write_text(md)
    print(md)
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
