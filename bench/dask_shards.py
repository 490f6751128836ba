"""The sharded preprocessing stages (parse, ground) on Dask, side by side on the same world (``make scale-dask``):
the flow's default task runner (Prefect's threads), a ``LocalCluster`` of 1 and of 2 worker processes
(``dask: {local_workers: N}``), and a scheduler and 2 workers started as processes of their own on 127.0.0.1, reached
through ``dask: {address: tcp://127.0.0.1:PORT}`` the way a real cluster is. Each variant is a ``macco run`` of the
two stages, forced, in a process of its own (its own ephemeral Prefect server); the stage seconds are the runner's
own (``.stage_times.json``), so the server's start is not in them. Every variant must write the same tables
(their Parquet bytes compared), or the script fails.

    python bench/dask_shards.py --captions 50000 [--shard 2500] [--root artifacts-scale] [--out bench/dask_shards.json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path.cwd()))
from scale import config_for, run_stage  # noqa: E402  (bench/scale.py: the same COCO-proportioned world)

SHARDED = ("parse", "ground")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tables_digest(art: Path) -> dict[str, str]:
    """The sha256 over each sharded stage's table parts, in name order (the newest folder of each stage)."""
    out = {}
    for stage in SHARDED:
        folder = max((art / stage).glob("*/stage.json"), key=lambda p: p.stat().st_mtime).parent
        h = hashlib.sha256()
        for part in sorted(folder.rglob("*.parquet")):
            h.update(part.relative_to(folder).as_posix().encode())
            h.update(part.read_bytes())
        out[stage] = h.hexdigest()
    return out


def run_variant(config: Path, art: Path, dask: dict | None, env: dict) -> dict:
    """One forced ``macco run --stages parse ground`` with ``dask`` set in the config: its wall and stage seconds."""
    import yaml

    cfg = yaml.safe_load(config.read_text())
    if dask:
        cfg["dask"] = dask
    else:
        cfg.pop("dask", None)
    variant = config.with_name(config.stem + "-variant.yaml")
    variant.write_text(yaml.safe_dump(cfg))
    macco = str(Path(sys.executable).with_name("macco"))
    t0 = time.perf_counter()
    r = subprocess.run([macco, "run", "--config", str(variant), "--stages", *SHARDED, "--force", *SHARDED],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"dask {dask}: {(r.stdout + r.stderr)[-3000:]}")
    times = json.loads((art / ".stage_times.json").read_text())
    return {"wall_s": round(wall, 1), **{f"{s}_s": times[s] for s in SHARDED}, "digest": tables_digest(art)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captions", type=int, default=50000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--shard", type=int, default=2500, help="parse and ground shard size (enough shards to share)")
    ap.add_argument("--root", type=Path, default=Path("artifacts-scale"))
    ap.add_argument("--out", type=Path, default=Path("bench/dask_shards.json"))
    args = ap.parse_args()
    import yaml

    art = args.root / f"dask-c{args.captions}"
    config = args.root / f"dask-c{args.captions}.yaml"
    args.root.mkdir(parents=True, exist_ok=True)
    cfg = config_for(args.captions, args.size, args.shard, art)
    cfg["parse"]["n_process"] = 1  # one process per shard: the workers are the parallelism here
    config.write_text(yaml.safe_dump(cfg))
    for stage in ("world", "captions"):  # the shared upstream, once
        run_stage(config, stage)
    env = {**os.environ, "PREFECT_HOME": str(args.root / "prefect-home"), "OMP_NUM_THREADS": "1"}
    env.pop("PREFECT_API_URL", None)
    port = free_port()
    results = {}
    for label, dask in (("Prefect threads (no Dask)", None), ("LocalCluster, 1 worker", {"local_workers": 1}),
                        ("LocalCluster, 2 workers", {"local_workers": 2}),
                        ("scheduler + 2 workers (dask.address)", {"address": f"tcp://127.0.0.1:{port}"})):
        procs = []
        if dask and "address" in dask:
            dask_cli = str(Path(sys.executable).with_name("dask"))
            procs.append(subprocess.Popen([dask_cli, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                           "--no-dashboard"], env=env, start_new_session=True,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(3)
            procs.append(subprocess.Popen([dask_cli, "worker", f"tcp://127.0.0.1:{port}", "--nworkers", "2",
                                           "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
                                          env=env, start_new_session=True,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(5)
        try:
            results[label] = run_variant(config, art, dask, env)
        finally:
            for p in procs:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=30)
        r = results[label]
        print(f"{args.captions} captions, {label:<38} parse {r['parse_s']:>7.1f} s  ground {r['ground_s']:>6.1f} s  "
              f"(run {r['wall_s']:.1f} s with the Prefect server's start)", flush=True)
    digests = {json.dumps(r.pop("digest"), sort_keys=True) for r in results.values()}
    if len(digests) != 1:
        raise SystemExit(f"the variants wrote different tables: {digests}")
    one, two = results["LocalCluster, 1 worker"], results["LocalCluster, 2 workers"]
    print(f"speed-up 1 -> 2 workers: parse {one['parse_s'] / two['parse_s']:.2f}x, "
          f"ground {one['ground_s'] / two['ground_s']:.2f}x; every variant wrote the same tables")
    args.out.write_text(json.dumps({"captions": args.captions, "shard": args.shard, "variants": results}, indent=1))


if __name__ == "__main__":
    main()
