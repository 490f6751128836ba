"""``macco inspect``: a summary of the mask tables and a ``macco.duckdb`` file with views over them."""
from __future__ import annotations

from pathlib import Path

from data_schemas.checks import create_views


def write_duckdb(tables: dict, db_path: str | Path) -> Path:
    """(Re)create ``db_path`` with one view per table over its validated part files (absolute paths)."""
    import duckdb

    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(db_path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    create_views(con, tables)
    con.close()
    tmp.replace(db_path)
    return db_path


def summarize(tables: dict) -> dict:
    import duckdb

    con = duckdb.connect()
    create_views(con, tables)
    out: dict = {"rows": {n: con.execute(f"select count(*) from {n}").fetchone()[0] for n in tables}}
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    if "token_masks" in tables:
        share, rel, att = q("select avg(case when len(relation_idx) + len(attribute_idx) > 0 then 1.0 else 0 end),"
                            " avg(len(relation_idx)), avg(len(attribute_idx)) from token_masks")[0]
        out["text_mask_coverage"] = share
        out["masked_relation_tokens_per_caption"] = rel
        out["masked_attribute_tokens_per_caption"] = att
        out["unmatched_concepts"] = q("select coalesce(sum(len(unmatched)), 0) from token_masks")[0][0]
        out["truncated_captions"] = q("select count(*) from token_masks where truncated")[0][0]
    if "scene_graphs" in tables:
        for kind in ("relation", "attribute"):
            out[f"top_{kind}s"] = q(f"select lower(text), count(*) c from scene_graphs where kind = '{kind}' "
                                    f"group by 1 order by c desc, 1 limit 10")
    if "patch_masks" in tables:
        out["masked_patches_per_phrase"] = q(
            "select grid, avg(len(patch_idx)), min(len(patch_idx)), max(len(patch_idx)) from patch_masks "
            "group by grid order by grid")
    if "regions" in tables and "scene_graphs" in tables:
        out["grounded_phrase_share"] = q(
            "select avg(case when r.caption_id is null then 0.0 else 1.0 end) from scene_graphs s left join "
            "(select distinct caption_id, concept_id from regions) r using (caption_id, concept_id) "
            "where s.kind in ('attribute', 'relation')")[0][0]
    if "errors" in tables:
        out["errors"] = q("select stage, reason, count(*) from errors group by all order by 3 desc")
    con.close()
    return out


def format_summary(s: dict) -> str:
    lines = ["rows per table:"] + [f"  {k:<13} {v:>9}" for k, v in s["rows"].items()]
    for k, v in s.items():
        if k == "rows":
            continue
        if isinstance(v, list):
            lines.append(f"{k}:")
            lines += [f"  {' | '.join(str(x) for x in row)}" for row in v]
        elif isinstance(v, float):
            lines.append(f"{k}: {v:.3f}")
        else:
            lines.append(f"{k}: {v}")
    return "\n".join(lines)
