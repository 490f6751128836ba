"""Where a table's rows came from: the version of the code that wrote them (the manifests' ``code_version``, the
flow's stage keys, the evaluation history's ``code_version`` column), and the fingerprint of a folder of inputs.

A code version hashes files, never imported modules: the import closure is read from the sources (``ast``), each
module's data files from its ``DATA_FILES`` (a literal tuple of globs relative to its folder: the configs, word lists
and templates the code reads), so computing a version imports nothing and a changed JSON is a changed version."""
from __future__ import annotations

import ast
import hashlib
import threading
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DECLARED = "DATA_FILES"  # the module-level name declaring the data files a module reads
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
_PARSING = threading.Lock()  # CPython 3.11's ast.parse is not thread-safe (a stage's shards run in threads)


def _tree(path: Path) -> ast.Module:
    """``path``'s syntax tree, one parse at a time: two threads parsing at once raised ``SystemError: AST
    constructor recursion depth mismatch`` in a grounding shard."""
    source = path.read_bytes()
    with _PARSING:
        return ast.parse(source)


def module_path(name: str) -> Path | None:
    """The source file of module ``name`` (dotted) in this repository's packages, or None (a third-party module,
    or a symbol imported from a module)."""
    parts, repo = name.split("."), REPO
    if not parts[0] or not (repo / parts[0] / "__init__.py").is_file():
        return None
    base = repo.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=None)
def module_closure(*roots: str) -> tuple[str, ...]:
    """``roots`` and every module of this repository they import, transitively (top-level, function-level and
    TYPE_CHECKING imports, read from the source): the modules whose code a stage's output depends on."""
    seen: dict[str, Path] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        path = module_path(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                todo += [base] + [f"{base}.{a.name}" for a in node.names]
    return tuple(sorted(seen))


def data_files(name: str) -> tuple[Path, ...]:
    """The files module ``name`` declares it reads (its ``DATA_FILES`` globs, relative to its folder); a
    declaration that is not a literal tuple of strings, or a glob matching nothing, is an error naming it."""
    path = module_path(name)
    globs: list[str] = []
    for node in _tree(path).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == DECLARED for t in node.targets):
            try:
                globs = list(ast.literal_eval(node.value))
            except ValueError:
                globs = [None]
            if not all(isinstance(g, str) for g in globs):
                raise ValueError(f"{path}:{node.lineno}: {DECLARED} must be a literal tuple of glob strings")
    out = []
    for g in globs:
        found = sorted(p for p in path.parent.glob(g) if p.is_file())
        if not found:
            raise FileNotFoundError(f"{path}: {DECLARED} entry {g!r} matches no file")
        out += found
    return tuple(out)


@lru_cache(maxsize=None)
def code_files(*roots: str) -> tuple[Path, ...]:
    """The files a code version covers: every module of the roots' import closure and the data files each declares."""
    return tuple(sorted({f for m in module_closure(*roots) for f in (module_path(m), *data_files(m))}))


def source_bytes(path: Path) -> bytes:
    """The bytes a code version hashes of one file (one place to read them: the tests change them here)."""
    return path.read_bytes()


def files_version(files) -> str:
    """sha256 (12 hex) over ``files``: each one's path in the repository and its bytes, length-prefixed."""
    h = hashlib.sha256()
    for path in sorted(set(files)):
        for part in (Path(path).resolve().relative_to(REPO).as_posix().encode(), source_bytes(Path(path))):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
    return h.hexdigest()[:12]


def closure_version(*roots: str) -> str:
    """A stage's code version: the sources and data files of its code roots' import closure (``code_files``), so
    every module it runs and every file that code reads is covered, and no list of modules is kept by hand."""
    return files_version(code_files(*roots))


def package_versions(names) -> list[tuple[str, str | None]]:
    """(distribution, installed version or None) of each of ``names``: the packages a stage calls, for its key."""
    return [(name, _version(name)) for name in names]


@lru_cache(maxsize=None)
def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes, read in 1 MiB chunks: weights files, checkpoints, exports."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def folder_fingerprint(root: str | Path) -> list:
    """What a folder of inputs holds (a user's benchmark root): every file's relative name and size, with the sha256
    of its bytes (annotations, word lists: what a corrected file changes), except images, whose modification time
    stands in for their bytes (hashing every image of a benchmark on every run would cost minutes)."""
    root = Path(root)
    if not root.is_dir():
        return [str(root), None]
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            own = st.st_mtime_ns if p.suffix.lower() in IMAGE_SUFFIXES else file_sha256(p)
            out.append((p.relative_to(root).as_posix(), st.st_size, own))
    return out
