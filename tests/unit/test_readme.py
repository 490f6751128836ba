"""The README's shell blocks say only what exists: every ``macco`` command line parses with the real CLI, every
``make`` target is in the Makefile, every deployment it runs is in prefect.yaml, every config file it names
ships. (The blocks that need no GPU or user data are run as written elsewhere: the DuckDB inspection block in
test_report_sql, the deployment block's steps in tests/e2e/test_flow.py, ``make test`` by CI.)"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def shell_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        lines += [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return lines


def argv_of(line: str) -> list[str]:
    """The words of a command line without its comment and background ``&``; placeholders become words."""
    words = shlex.split(line.replace("…", "x"), comments=True)
    return [re.sub(r"<[^>]+>", "x", w) for w in words if w != "&"]


def test_readme_has_shell_blocks():
    lines = shell_lines()
    assert any(ln.startswith("macco ") for ln in lines) and any(ln.startswith("make ") for ln in lines)


@pytest.mark.parametrize("line", [ln for ln in shell_lines() if ln.startswith("macco ")])
def test_every_macco_line_parses_with_the_cli(line):
    from macco.cli import build_parser

    argv = argv_of(line)[1:]
    if "--help" in argv:
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(argv)
        assert exit_.value.code == 0
        return
    args = build_parser().parse_args(argv)
    assert callable(args.fn)


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
    for config in re.findall(r"configs/[\w.-]+\.yaml", (REPO / "README.md").read_text()):
        assert (REPO / config).is_file(), config


def test_every_fault_row_names_a_test_that_exists():
    """README "When things go wrong": each row's tests (``file::name``; ``…::name`` = the row's previous file)
    are real test functions, so the table cannot claim a behaviour nothing tests."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## When things go wrong"):text.index("## Development")]
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
    """A `deployment run` without a config runs the deployment's default (the demo): each README line says which
    config it means."""
    runs = [ln for ln in shell_lines() if "deployment run" in ln]
    assert runs
    for line in runs:
        assert "config" in line and "configs/" in line, line
