"""pipeline/validate.py: ``macco validate`` (and ``inspect``) on clean and violating tables."""
from tests_support import clean_rows, write_all


def test_cli_validate_and_inspect(tmp_path, capsys):
    import duckdb

    from macco.cli import main

    write_all(tmp_path / "artifacts", clean_rows())
    assert main(["validate", str(tmp_path / "artifacts")]) == 0
    assert "all" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "artifacts")]) == 0
    out = capsys.readouterr().out
    assert "text_mask_coverage: 1.000" in out and "macco.duckdb" in out
    con = duckdb.connect(str(tmp_path / "artifacts" / "macco.duckdb"), read_only=True,
                         config={"file_search_path": str(tmp_path / "artifacts")})
    assert con.execute("select count(*) from patch_masks").fetchone()[0] == 2
    con.close()
    bad = clean_rows()
    bad["patch_masks"][1]["patch_idx"] = [0, 64]
    write_all(tmp_path / "bad", bad)
    assert main(["validate", str(tmp_path / "bad")]) == 1
    err = capsys.readouterr().err
    assert "patch_masks.patch_in_grid" in err and "caption_id=1, concept_id=3, grid=8" in err
