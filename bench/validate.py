"""Time every DuckDB check over 600,000 synthetic patch/token mask rows (target: < 2 s on 2 cores)."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from data_schemas import TABLES, write_table  # noqa: E402
from data_schemas.checks import run_checks  # noqa: E402


def build(root: Path, n_captions: int = 200_000) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    cid = np.arange(n_captions, dtype=np.int64)
    caps = pa.table({"caption_id": cid, "image_id": cid // 5, "file_name": pa.array(["x.jpg"] * n_captions),
                     "width": pa.array(np.full(n_captions, 640), pa.int32()),
                     "height": pa.array(np.full(n_captions, 480), pa.int32()),
                     "caption": pa.array(["a red circle left of a blue square"] * n_captions),
                     "split": pa.array(["train"] * n_captions)})
    ids = [49406, 320, 736, 2866, 1823, 539, 320, 1746, 5468, 49407] + [0] * 67
    tm = pa.table({"caption_id": cid, "tokenizer": pa.array(["clip-bpe"] * n_captions),
                   "token_ids": pa.array([ids] * n_captions, pa.list_(pa.int32())),
                   "eot_idx": pa.array(np.full(n_captions, 9), pa.int32()),
                   "relation_idx": pa.array([[4, 5]] * n_captions, pa.list_(pa.int32())),
                   "attribute_idx": pa.array([[2, 7]] * n_captions, pa.list_(pa.int32())),
                   "object_idx": pa.array([[3, 8]] * n_captions, pa.list_(pa.int32())),
                   "unmatched": pa.array([[]] * n_captions, pa.list_(pa.string())),
                   "truncated": pa.array(np.zeros(n_captions, bool))})
    # 3 phrases per caption -> 600k patch-mask rows
    n = 3 * n_captions
    pm_cid = np.repeat(cid, 3)
    concept = np.tile(np.array([2, 3, 4], np.int32), n_captions)
    starts = rng.integers(0, 40, n)
    patch = [list(range(s, s + 6)) for s in starts]
    pm = pa.table({"caption_id": pm_cid, "concept_id": pa.array(concept), "grid": pa.array(np.full(n, 7), pa.int32()),
                   "image_id": pm_cid // 5, "patch_idx": pa.array(patch, pa.list_(pa.int32())),
                   "image_size": pa.array(np.full(n, 224), pa.int32()),
                   "patch_size": pa.array(np.full(n, 32), pa.int32()),
                   "preprocess": pa.array(["resize-center-crop"] * n)})
    out = {}
    for name, t in (("captions", caps), ("token_masks", tm), ("patch_masks", pm)):
        out[name] = root / name
        write_table(TABLES[name], out[name], t.cast(TABLES[name].arrow_schema), rows_per_part=150_000)
    return out


def main() -> dict:
    with tempfile.TemporaryDirectory() as d:
        tables = build(Path(d))
        run_checks({"patch_masks": tables["patch_masks"]}, only=["patch_masks.key_unique"])  # warm-up
        t0 = time.perf_counter()
        res = run_checks(tables)
        dt = time.perf_counter() - t0
    ran = [r for r in res if r.status != "skip"]
    print(f"validate: {len(ran)} checks over 600,000 patch-mask + 200,000 token-mask + 200,000 caption rows: "
          f"{dt:.2f} s (target < 2 s: {'met' if dt < 2 else 'NOT met'})")
    return {"validate_seconds": dt, "checks": len(ran), "target_met": dt < 2}


if __name__ == "__main__":
    main()
