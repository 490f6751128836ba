"""#32: the code stays readable in one sitting: no module of the packages over 400 lines, no function over 80."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("data_schemas", "pipeline", "model", "flows", "macco")


def test_no_module_over_400_lines_and_no_function_over_80():
    big = []
    for pkg in PACKAGES:
        for p in sorted((REPO / pkg).rglob("*.py")):
            text = p.read_text()
            if len(text.splitlines()) > 400:
                big.append(f"{p.relative_to(REPO)}: {len(text.splitlines())} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > 80:
                        big.append(f"{p.relative_to(REPO)}:{node.lineno} {node.name}: {n} lines")
    assert not big, big
