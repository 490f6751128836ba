"""``make bench``: run every bench/ script (each in its own process) and write bench/results.md."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["validate.py", "parse.py", "ground.py", "train_step.py", "eval.py", "loader.py", "flow_cached.py"]


def machine() -> str:
    import torch

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, GPU: {gpu}; "
            f"Python {platform.python_version()}, torch {torch.__version__}")


def main() -> None:
    lines = [f"# Benchmarks ({datetime.date.today().isoformat()})", "", f"Machine: {machine()}", "",
             "Each figure is a ratio measured side by side in the same run; 'met' compares it with the issue's "
             "target.", ""]
    for s in SCRIPTS:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, str(HERE / s)], capture_output=True, text=True)
        out = [l for l in r.stdout.splitlines() if l.strip() and not l.startswith("WARNING")]
        lines.append(f"## {s} ({time.perf_counter() - t0:.0f} s)")
        lines.append("")
        lines += [f"    {l}" for l in out] or ["    (no output)"]
        if r.returncode:
            lines.append(f"    FAILED (exit {r.returncode}): {r.stderr.strip().splitlines()[-1] if r.stderr else ''}")
        lines.append("")
        print("\n".join(lines[-len(out) - 3:]), flush=True)
    gpu = HERE / "gpu_results.md"
    if gpu.exists():
        lines += ["## GPU (bench/gpu.sh)", "", gpu.read_text()]
    else:
        lines += ["## GPU", "", "No GPU run recorded yet: run `bash bench/gpu.sh > bench/gpu_results.md` on a GPU "
                  "machine (absolute GPU times are only quoted from such a run).", ""]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {HERE / 'results.md'}")


if __name__ == "__main__":
    main()
