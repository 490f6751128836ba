"""The GPU run's entry point (bench/gpu/run.py), dry-run on the CPU: its install step from a wheel folder into a
private target directory, and every section at tiny sizes (``--tiny --device cpu``) on a prepared tiny world,
writing the markdown with each section measured or 'skipped: <reason>'. No network, no GPU."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "bench" / "gpu"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_gpu_{name}", GPU / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_wheel(folder: Path, name: str, version: str = "0.1", tag: str = "py3-none-any") -> Path:
    """A minimal wheel holding one module ``name`` (``VALUE = 42``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    files[f"{info}/RECORD"] = "".join(f"{k},,\n" for k in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    return path


def test_install_goes_into_the_target_only_and_refuses_a_wheel_for_another_python(tmp_path):
    run = load("run")
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "macco_gpu_probe")
    target = tmp_path / "site"
    res = run.install(wheels, target)
    assert res["wheels"] == ["macco_gpu_probe-0.1-py3-none-any.whl"] and (target / "macco_gpu_probe.py").exists()
    assert importlib.util.find_spec("macco_gpu_probe") is None  # not in this interpreter's site-packages
    out = subprocess.run([sys.executable, "-c", "import macco_gpu_probe; print(macco_gpu_probe.__file__)"],
                         env={**os.environ, "PYTHONPATH": run.pythonpath(target)}, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().startswith(str(target))
    other = "cp39-cp39-manylinux2014_x86_64" if sys.version_info[:2] != (3, 9) else "cp38-cp38-manylinux2014_x86_64"
    bad = tmp_path / "bad"
    make_wheel(bad, "macco_gpu_probe", tag=other)
    with pytest.raises(RuntimeError, match="pip install failed"):
        run.install(bad, tmp_path / "site2")


def test_wheel_list_pins_what_the_lent_machine_lacks():
    pins = load("prepare").pins()
    names = {p.split("==")[0] for p in pins}
    assert names == {"open_clip_torch", "ftfy", "wcwidth"}
    assert all("==" in p for p in pins)


def test_tiny_cpu_run_writes_every_section(tmp_path):
    run = load("run")
    carry = tmp_path / "carry"
    make_wheel(carry / "wheels", "macco_gpu_probe")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("OUT", None)
    # what `make gpu-wheels` writes beside the wheels, at the dry run's size
    p = subprocess.run([sys.executable, str(GPU / "prepare.py"), "--world-only", "--tiny", "--dest", str(carry)],
                       capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert p.returncode == 0 and "limit 64 MiB" in p.stdout, p.stderr[-2000:]
    out = tmp_path / "out" / "gpu_results.md"
    r = subprocess.run([sys.executable, str(GPU / "run.py"), "--tiny", "--device", "cpu", "--carry", str(carry),
                        "--out", str(out)], capture_output=True, text=True, timeout=240, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    md = out.read_text()
    assert md in r.stdout
    assert "Install: 1 wheels" in md and "macco_gpu_probe-0.1-py3-none-any.whl" in md
    parts = {}
    for title in run.TITLES.values():
        assert f"## {title}\n" in md, title
        parts[title] = md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    for title, body in parts.items():  # each section measured (a table) or says why not
        assert "| " in body or "skipped: " in body, (title, body)
    assert "skipped: torch.compile is measured on CUDA only" in parts[run.TITLES["compile"]]
    train = parts[run.TITLES["train"]]
    assert sum(ln.startswith(("| macco |", "| clip-ft |")) for ln in train.splitlines()) == 4, train
    assert "MACCO / CLIP-FT step time: fp16" in train and "skipped" not in train
    assert "| 0 |" in parts[run.TITLES["loader"]] and "| 1 |" in parts[run.TITLES["loader"]]
    ground = parts[run.TITLES["ground"]]
    assert "| hf (transformers" in ground and "skipped: groundingdino: " in ground
    assert parts[run.TITLES["eval"]].count("| macco-micro |") == 2
    e2e = parts[run.TITLES["e2e"]]
    assert "| macco-micro | 8 | 2 |" in e2e and "World built here" not in e2e  # the prepared world was used
    assert "same key set as the checkpoint's CLIP and the .pt: yes; weights equal to the checkpoint's: yes" in e2e
    raw = json.loads(out.with_suffix(".json").read_text())
    assert {s["status"] for s in raw["sections"].values()} == {"ok"}
