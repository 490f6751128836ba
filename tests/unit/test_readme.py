"""The README's and the documentation pages' shell blocks say only what exists: every ``macco`` command line
parses with the real CLI (the README's here, the docs pages' in test_docs.py), every ``make`` target is in the
Makefile, every deployment they run is in prefect.yaml, every config file they name ships. The blocks that need no
GPU or user data are run as written: the DuckDB inspection block here (its last tests), the deployment block's steps
in tests/e2e/test_pipeline.py, the first hour in tests/e2e/test_readme_commands.py, ``make test`` by CI."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from macco.cli import main
from tests_support import artifacts_cwd  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# the documentation site's pages (mkdocs.yml); docs/cli.md is generated at build time from the parsers themselves
DOC_PAGES = sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "cli.md")
PAGES = [README, *DOC_PAGES]


def shell_lines(pages: list[Path] | None = None) -> list[str]:
    """The command lines of the ```bash blocks of ``pages`` (default: the README and every docs page)."""
    lines = []
    for page in PAGES if pages is None else pages:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            lines += [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return lines


def argv_of(line: str) -> list[str]:
    """The words of a command line without its comment and background ``&``; placeholders become words."""
    words = shlex.split(line.replace("…", "x"), comments=True)
    return [re.sub(r"<[^>]+>", "x", w) for w in words if w != "&"]


def assert_parses(line: str) -> None:
    """``line`` (``macco …``) parses with the real CLI to a verb; ``--help`` exits 0."""
    from macco.cli import build_parser

    argv = argv_of(line)[1:]
    if "--help" in argv:
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(argv)
        assert exit_.value.code == 0
        return
    args = build_parser().parse_args(argv)
    assert callable(args.fn)


def test_readme_has_shell_blocks():
    lines = shell_lines([README])
    assert any(ln.startswith("macco ") for ln in lines) and any(ln.startswith("make ") for ln in lines)


@pytest.mark.parametrize("line", [ln for ln in shell_lines([README]) if ln.startswith("macco ")])
def test_every_macco_line_parses_with_the_cli(line):
    assert_parses(line)


def test_make_targets_deployments_and_configs_exist():
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, flags=re.M))
    deployments = {d["name"] for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]}
    for line in shell_lines():
        argv = argv_of(line)
        if argv[0] == "make":
            assert argv[1] in targets, line
        if argv[:3] == [".venv/bin/prefect", "deployment", "run"]:
            flow, _, name = argv[3].partition("/")
            assert flow == "macco" and name in deployments, line
    for page in PAGES:
        for config in re.findall(r"configs/[\w.-]+\.yaml", page.read_text()):
            assert (REPO / config).is_file(), (page.name, config)


def test_every_fault_row_names_a_test_that_exists():
    """docs/troubleshooting.md "When things go wrong": each row's tests (``file::name``; ``…::name`` = the row's
    previous file) are real test functions, so the table cannot claim a behaviour nothing tests."""
    text = (REPO / "docs" / "troubleshooting.md").read_text()
    section = text[text.index("# When things go wrong"):]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| fault")]
    assert len(rows) >= 30
    for row in rows:
        refs = re.findall(r"`((?:tests/\w+/)?[\w…]+\.py|…)::(test_\w+)`", row)
        assert refs, row
        current = None
        for file, name in refs:
            if file != "…":
                current = file if file.startswith("tests/") else next(
                    str(p.relative_to(REPO)) for p in (REPO / "tests").rglob(file))
            assert current is not None, row
            assert re.search(rf"^def {name}\(", (REPO / current).read_text(), flags=re.M), (current, name)


def test_every_deployment_run_line_names_its_config():
    """A `deployment run` without a config runs the deployment's default (the demo): each line of the README and the
    docs pages says which config it means."""
    runs = [ln for ln in shell_lines() if "deployment run" in ln]
    assert runs
    for line in runs:
        assert "config" in line and "configs/" in line, line


# ---- the DuckDB inspection block, run as written ---------------------------------------------------------------
def readme_blocks(heading: str) -> list[tuple[str, str]]:
    """(language, code) of the fenced blocks under ``heading``, up to the next heading outside a block."""
    lines = README.read_text().splitlines()
    blocks, fence = [], None
    for ln in lines[lines.index(heading) + 1:]:
        if fence is None and ln.startswith("#"):
            break
        if ln.startswith("```"):
            if fence is None:
                fence = (ln[3:].strip(), [])
            else:
                blocks.append((fence[0], "\n".join(fence[1]) + "\n"))
                fence = None
        elif fence is not None:
            fence[1].append(ln)
    return blocks


def readme_commands(heading: str, verb: str) -> list[list[str]]:
    """The ``macco <verb>`` lines of the section's bash blocks, as argv for ``main`` (comments dropped)."""
    lines = [ln for lang, code in readme_blocks(heading) if lang == "bash" for ln in code.splitlines()]
    return [shlex.split(ln, comments=True)[1:] for ln in lines if ln.startswith(f"macco {verb} ")]


DUCKDB_HEADING = "### Inspecting the mask tables in DuckDB"


def test_readme_python_duckdb_block_runs_as_written(artifacts_cwd, capsys):
    """The README's ``macco inspect`` line writes artifacts/macco.duckdb; its Python block's queries run on it."""
    inspect = readme_commands(DUCKDB_HEADING, "inspect")
    assert inspect == [["inspect", "artifacts/"]]
    assert main(inspect[0]) == 0
    assert (artifacts_cwd / "macco.duckdb").exists()
    capsys.readouterr()
    code = [c for lang, c in readme_blocks(DUCKDB_HEADING) if lang == "python"]
    assert len(code) == 1 and 'duckdb.connect("artifacts/macco.duckdb"' in code[0]
    exec(compile(code[0], "README.md", "exec"), {})
    out = capsys.readouterr().out
    # one printed relation per query: grid averages, relation words, unmatched captions, one caption's concepts
    assert out.count("┌") == code[0].count(".show()") == 4
    assert "avg(len(patch_idx))" in out and "box_xyxy" in out


def test_readme_sql_line_runs_as_written(artifacts_cwd, capsys):
    """The README's ``macco sql`` line, from the directory holding artifacts/ (the default root)."""
    import duckdb

    sql = readme_commands(DUCKDB_HEADING, "sql")
    assert len(sql) == 1 and "--root" not in sql[0]
    assert main(sql[0]) == 0
    out = capsys.readouterr().out.splitlines()
    cols = duckdb.sql(f"select * from read_parquet('{artifacts_cwd}/ground/patch_masks/*.parquet') limit 0").columns
    assert out[0].split() == cols and out[-1] == "(5 rows)" and len(out) == 2 + 5 + 1


# ---- loading an export in plain open_clip, run as written ----------------------------------------------------
OPEN_CLIP_HEADING = "## Loading an export in open_clip"
PROJECT_PACKAGES = {"macco", "model", "pipeline", "flows", "data_schemas"}


def first_hour_line(start: str) -> list[str]:
    """The README first hour's line starting with ``start``, as argv for ``main``."""
    block = [c for lang, c in readme_blocks("## A first hour: every stage by hand on a tiny world") if lang == "bash"]
    line = next(ln for ln in block[0].splitlines() if ln.startswith(start))
    return shlex.split(line)[1:]


def test_readme_open_clip_block_runs_in_plain_open_clip(tmp_path, monkeypatch):
    """The README's Python block loads an export of the repo's own architecture (``macco-tiny``) through the model
    config written beside its weights, in a process that imports nothing of the project; its weights are the
    export's and it scores the first hour's world picture it names."""
    import json
    import subprocess
    import sys

    import open_clip
    import torch

    from model.export import export_clip
    from model.factory import register_model_configs

    code = [c for lang, c in readme_blocks(OPEN_CLIP_HEADING) if lang == "python"]
    assert len(code) == 1 and len(code[0].splitlines()) <= 12
    monkeypatch.chdir(tmp_path)
    assert main(first_hour_line("macco world --out tiny/world")) == 0
    register_model_configs()
    torch.manual_seed(0)
    clip = open_clip.create_model("macco-tiny")
    export_clip(clip, "macco-tiny", tmp_path / "tiny" / "run" / "export")
    assert json.loads((tmp_path / "tiny/run/export/macco-tiny.json").read_text()) == \
        open_clip.get_model_config("macco-tiny")
    check = (f"\nimport sys\nassert not {{m.split('.')[0] for m in sys.modules}} & set({sorted(PROJECT_PACKAGES)!r})"
             "\nprint(sorted(model.state_dict().items())[0][1].flatten()[:4].tolist())\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", code[0] + check], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    probs, first = run.stdout.strip().splitlines()[-2:]
    probs = eval(probs)  # the block prints a dict of text -> probability
    assert len(probs) == 2 and abs(sum(probs.values()) - 1) < 1e-4
    key, value = sorted(clip.state_dict().items())[0]
    assert eval(first) == pytest.approx(value.flatten()[:4].tolist())  # the export's weights, not a fresh init


def test_export_config_written_only_for_a_named_architecture(tmp_path):
    """A ``local-dir:`` source has its own open_clip_config.json and gets no ``<arch>.json`` (its folder's other
    files go along, as a SigLIP folder's tokenizer files do)."""
    import open_clip

    from model.export import export_clip
    from model.factory import register_model_configs

    register_model_configs()
    export_clip(open_clip.create_model("macco-micro"), "macco-micro", tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "macco-micro.json", "open_clip_config.json", "open_clip_model.safetensors"]
    export_clip(open_clip.create_model(f"local-dir:{tmp_path / 'a'}"), f"local-dir:{tmp_path / 'a'}", tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(p.name for p in (tmp_path / "a").iterdir())


# ---- the repository's front matter ------------------------------------------------------------------------------
def test_license_file_matches_pyproject():
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]["text"]
    assert declared == "MIT" and (REPO / "LICENSE").read_text().startswith("MIT License\n")


def test_first_hour_output_folder_is_ignored_by_git():
    ignored = (REPO / ".gitignore").read_text().splitlines()
    first_hour = "\n".join(c for _, c in readme_blocks("## A first hour: every stage by hand on a tiny world"))
    assert "tiny/" in first_hour and ("/tiny/" in ignored or "tiny/" in ignored)


def test_readme_demo_paragraph_has_no_internal_labels_and_a_citation():
    """The ``make demo`` paragraph speaks to a reader who has not read the experiments log (no E6, R4, …); the
    Citation section's BibTeX names the paper."""
    text = README.read_text()
    demo = next(p for p in text.split("\n\n") if p.startswith("`make demo`"))
    assert not re.findall(r"\b[ERH]\d+\b", demo), demo
    bib = [c for lang, c in readme_blocks("## Citation") if lang == "bibtex"]
    assert len(bib) == 1 and "title     = {Cross-Modal Masked Compositional Concept Modeling}" in bib[0]
    assert "ACL" in bib[0] and "year      = {2026}" in bib[0]
