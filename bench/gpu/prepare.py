"""``make gpu-wheels``: what the GPU run carries, written here into bench/gpu/.carry (ignored by git).

- ``wheels/``: exactly the wheels of ``wheels.txt``, for the lent machine's CPython 3.12 on manylinux x86-64,
  fetched with ``pip download --only-binary=:all: --no-deps`` through this machine's pip configuration (its
  package index); anything else in the folder is removed, so the install there takes one version of each.
- ``world/``: the end-to-end section's synthetic world at 224 px and its training tables (captions -> parse ->
  ground with the world's annotations). The parse stage needs spaCy, which that machine lacks, so it runs here.

The whole folder must stay under the carry limit together with the working tree (64 MiB): checked at the end.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
LIMIT_MIB = 64


def pins(path: Path = HERE / "wheels.txt") -> list[str]:
    """``name==version`` lines of the wheel list (comments and blank lines dropped)."""
    out = []
    for ln in path.read_text().splitlines():
        ln = ln.split("#", 1)[0].strip()
        if ln:
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.\-+]+", ln):
                raise ValueError(f"{path}: {ln!r} is not name==version")
            out.append(ln)
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def download_wheels(dest: Path, python_version: str = "3.12", requirements: list[str] | None = None) -> list[Path]:
    """``pip download`` each pin for CPython ``python_version`` on manylinux x86-64 into ``dest``; drops any
    other file there. Fails naming a pin with no such wheel."""
    requirements = requirements or pins()
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
           python_version, "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)],
           "-d", str(dest), *requirements]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if r.returncode:
        raise RuntimeError(f"pip download failed (exit {r.returncode}): {r.stderr.strip()[-800:]}")
    keep = []
    for req in requirements:
        name, version = req.split("==")
        found = [w for w in dest.glob("*.whl") if _norm(w.name.split("-")[0]) == _norm(name)
                 and w.name.split("-")[1] == version]
        if len(found) != 1:
            raise RuntimeError(f"{req}: expected one wheel in {dest}, found {[w.name for w in found]}")
        keep.append(found[0])
    for f in dest.iterdir():
        if f not in keep:
            f.unlink() if f.is_file() else shutil.rmtree(f)
    return keep


def write_world(dest: Path, tiny: bool = False) -> dict:
    """The e2e section's world and tables (``sections.prepare_world``) at the run's sizes."""
    for path in (HERE, REPO, REPO / "tests"):  # tests/ for tests_support
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    import sections

    size = sections.SIZES["tiny" if tiny else "full"]
    if dest.exists():
        shutil.rmtree(dest)
    t0 = time.perf_counter()
    tables = sections.prepare_world(dest, size["world_images"], size["world_size"])
    return {"dir": str(dest), "tables": {k: str(v) for k, v in tables.items()}, "seconds": time.perf_counter() - t0}


def mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2 ** 20 if path.exists() else 0.0


def tree_mib() -> float:
    """What else travels: tracked and untracked-not-ignored files of the working tree."""
    r = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True)
    files = {REPO / f for f in r.stdout.decode().split("\0") if f}
    return sum(f.stat().st_size for f in files if f.is_file()) / 2 ** 20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dest", type=Path, default=HERE / ".carry")
    ap.add_argument("--python-version", default="3.12")
    ap.add_argument("--wheels-only", action="store_true")
    ap.add_argument("--world-only", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="the tiny world of the CPU dry run")
    a = ap.parse_args(argv)
    if not a.world_only:
        for w in download_wheels(a.dest / "wheels", a.python_version):
            print(f"wheel {w.name}: {w.stat().st_size / 2 ** 20:.2f} MiB")
        print(f"wheels: {mib(a.dest / 'wheels'):.2f} MiB in {a.dest / 'wheels'}")
    if not a.wheels_only:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        w = write_world(a.dest / "world", a.tiny)
        print(f"world: {mib(a.dest / 'world'):.2f} MiB in {w['dir']} ({w['seconds']:.0f} s)")
    carry, tree = mib(a.dest), tree_mib()
    print(f"carry {carry:.2f} MiB + working tree {tree:.2f} MiB = {carry + tree:.2f} MiB (limit {LIMIT_MIB} MiB)")
    if carry + tree > LIMIT_MIB:
        print("over the limit of what travels", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
