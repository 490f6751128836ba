"""Where a table's rows came from: the version of the code that wrote them (the manifests' ``code_version``, the
flow's stage keys, the evaluation history's ``code_version`` column)."""
from __future__ import annotations

import hashlib
import importlib
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def module_closure(*roots: str) -> tuple[str, ...]:
    """``roots`` and every module of this repository they import, transitively (top-level, function-level and
    TYPE_CHECKING imports, read from the source): the modules whose code a stage's output depends on."""
    import ast
    import importlib.util

    repo = Path(__file__).resolve().parents[1]
    packages = {p.name for p in repo.iterdir() if (p / "__init__.py").is_file()}

    def path_of(name: str) -> Path | None:
        if name.split(".")[0] not in packages:
            return None
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a symbol imported from a module, not a module
            return None
        return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None

    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        path = path_of(name)
        if name in seen or path is None or repo not in path.parents:
            continue
        seen.add(name)
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                todo += [base] + [f"{base}.{a.name}" for a in node.names]
    return tuple(sorted(seen))


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes, read in 1 MiB chunks: weights files, checkpoints, exports."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def module_source(name: str) -> bytes:
    """The source bytes of module ``name`` (dotted): what its code version hashes."""
    return Path(importlib.import_module(name).__file__).read_bytes()


def code_version(*modules: str) -> str:
    """sha256 (12 hex) over the source files of ``modules`` (dotted names)."""
    h = hashlib.sha256()
    for name in sorted(set(modules)):
        h.update(name.encode())
        h.update(module_source(name))
    return h.hexdigest()[:12]


def closure_version(*roots: str) -> str:
    """A stage's code version: ``code_version`` over the import closure of its code roots (``module_closure``),
    so every module it runs is covered and no list of modules is kept by hand."""
    return code_version(*module_closure(*roots))
