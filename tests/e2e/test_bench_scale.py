"""bench/scale.py (``make scale``) at a small size: every stage of the preprocessing DAG runs as the flow runs it and
reports its wall time, peak memory, rows and disk; the queries run over its tables; the plot is written."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_scale_bench_measures_every_stage_at_a_small_size(tmp_path):
    out = tmp_path / "scale.json"
    r = subprocess.run([sys.executable, "bench/scale.py", "--captions", "300", "--shard", "100", "--root",
                        str(tmp_path / "art"), "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    (res,) = json.loads(out.read_text())
    stages = {s["stage"]: s for s in res["stages"]}
    assert list(stages) == ["world", "captions", "parse", "ground", "masks", "validate"]
    assert stages["captions"]["rows"]["captions"] == 300  # 5 per image, COCO's train / held-out proportion
    assert stages["parse"]["rows"]["token_masks"] == 300 and stages["parse"]["rows"]["scene_graphs"] > 0
    assert stages["ground"]["rows"]["regions"] > 0 and stages["masks"]["rows"]["patch_masks"] > 0
    assert all(s["wall_s"] > 0 and s["peak_rss_mb"] > 0 for s in stages.values())
    assert set(res["queries"]) >= {"validate --deep", "sql: top relation words"}
    png = tmp_path / "scale.png"
    r = subprocess.run([sys.executable, "bench/scale.py", "--plot", str(out), str(png)], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
