"""``make bench``: run every bench/ script (each in its own process) and write bench/results.md."""
from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["validate.py", "parse.py", "ground.py", "train_step.py", "threads.py", "eval.py", "loader.py",
           "flow_cached.py"]


def machine() -> str:
    import torch

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, GPU: {gpu}; "
            f"Python {platform.python_version()}, torch {torch.__version__}")


RATIO = re.compile(r"(?:ratio|stage/raw) ([0-9]+(?:\.[0-9]+)?)")
NOISE = ("final text_encoder_type", "WARNING")  # groundingdino-py prints the first on every model build


def ratios(text: str) -> dict[str, float]:
    """{"<section> #k": value} for the k-th ratio printed in each script's section of a results file."""
    out, section, k = {}, "", 0
    for line in text.splitlines():
        if line.startswith("## "):
            section, k = line[3:].split(" (")[0], 0
            continue
        for m in RATIO.finditer(line):
            label = line.strip().split(":")[0]
            out[f"{section}: {label} #{k}"] = float(m.group(1))
            k += 1
    return out


def stability(previous: str, current: str) -> list[str]:
    """A table of every ratio of this run beside the previous results file's."""
    old, new = ratios(previous), ratios(current)
    common = [k for k in new if k in old]
    if not common:
        return []
    lines = ["## Against the previous run", "",
             "Each ratio of this run beside the one in the results file it replaced (the same scripts, run again).",
             "", "| figure | previous | this run | this / previous |", "|---|---|---|---|"]
    for k in common:
        change = f"{new[k] / old[k]:.2f}" if old[k] else "-"
        lines.append(f"| {k.rsplit(' #', 1)[0]} | {old[k]:g} | {new[k]:g} | {change} |")
    return lines + [""]


def main() -> None:
    previous = (HERE / "results.md").read_text() if (HERE / "results.md").exists() else ""
    lines = [f"# Benchmarks ({datetime.date.today().isoformat()})", "", f"Machine: {machine()}", "",
             "Each figure is a ratio measured side by side in the same run; 'met' compares it with the issue's "
             "target.", ""]
    for s in SCRIPTS:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, str(HERE / s)], capture_output=True, text=True)
        out = [l for l in r.stdout.splitlines() if l.strip() and not l.startswith(NOISE)]
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
    lines += stability(previous, "\n".join(lines))
    scale = HERE / "scale.md"  # the long runs outside make bench (make scale, scale-dask, ...): kept as measured
    if scale.exists():
        lines += ["", scale.read_text()]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {HERE / 'results.md'}")


if __name__ == "__main__":
    main()
