"""``macco train --help``'s list of config keys: every field of ``TrainConfig`` with its default *value* (as a
``key=value`` override or a YAML file writes it), read from the modules' source so the help needs no torch.

A default is evaluated from the source the way Python would: literals, module-level names (``DEFAULT_ARCH``,
followed through ``from … import``), ``unkeyed(…)`` / ``field(default=…, default_factory=…)``, a helper that returns
such a field (``model.losses._term``), a dataclass instance or ``asdict`` of one (``LossWeights``). Anything else is
an error, so the help never shows a source expression (``tests/unit/test_config_help.py``)."""
from __future__ import annotations

import ast
import importlib.util
import json
from functools import cache
from pathlib import Path

TRAIN_CONFIG = ("model.train_config", "TrainConfig")
FIELD_CALLS = {"unkeyed", "field"}


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(Path(importlib.util.find_spec(module).origin).read_text())


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` in ``module`` names (relative imports resolved)."""
    if not node.level:
        return node.module
    base = module.split(".")[:-node.level]
    return ".".join(base + ([node.module] if node.module else []))


def _definition(module: str, name: str) -> tuple[str, ast.AST]:
    """(module, node) defining ``name`` as seen from ``module``: an assignment's value, a class or a function,
    followed through ``from x import name``."""
    for node in _tree(module).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return module, node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return module, node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                and node.value is not None:
            return module, node.value
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            alias = next(a for a in node.names if (a.asname or a.name) == name)
            return _definition(_absolute(module, node), alias.name)
    raise ValueError(f"{module}: no definition of {name!r} to show as a default")


def dataclass_defaults(module: str, cls: str) -> dict:
    """{field: default value} of a dataclass, in field order (fields without a default left out)."""
    where, node = _definition(module, cls)
    if not isinstance(node, ast.ClassDef):
        raise ValueError(f"{module}.{cls} is not a class")
    return {n.target.id: _field_default(where, n.value) for n in node.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None}


def _field_default(module: str, node: ast.expr, env: dict | None = None):
    """The default a field's right-hand side gives (``unkeyed(x)``, ``field(default_factory=…)``, a plain value)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        if name in FIELD_CALLS:
            kw = {k.arg: k.value for k in node.keywords}
            if node.args or "default" in kw:
                return _value(module, node.args[0] if node.args else kw["default"], env)
            return _value(module, ast.Call(func=kw["default_factory"], args=[], keywords=[]), env)
        where, fn = _definition(module, name)
        if isinstance(fn, ast.FunctionDef):  # a helper returning a field: its parameters bound to the arguments
            bound = {a.arg: _value(module, v, env) for a, v in zip(fn.args.args, node.args)}
            ret = next(n.value for n in ast.walk(fn) if isinstance(n, ast.Return))
            return _field_default(where, ret, bound)
    return _value(module, node, env)


def _value(module: str, node: ast.expr, env: dict | None = None):
    """The value of a default's expression."""
    env = env or {}
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.Lambda):
        return _value(module, node.body, env)
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Name):
        where, value = _definition(module, node.id)
        return _value(where, value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Lambda):
        return _value(module, node.func.body, env)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        if name in ("dict", "list", "tuple") and not node.args:
            return {"dict": {}, "list": [], "tuple": ()}[name]
        if name == "asdict" and len(node.args) == 1:
            return _value(module, node.args[0], env)
        where, fn = _definition(module, name)
        if isinstance(fn, ast.ClassDef) and not node.args and not node.keywords:
            return dataclass_defaults(where, name)
    raise ValueError(f"{module}: cannot show {ast.unparse(node)!r} as a value")


def shown(value) -> str:
    """A default as a ``key=value`` override or a YAML file writes it (JSON is YAML's flow style)."""
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def train_keys_help() -> str:
    """Every key of a training config with its default value; ``*``: a key that does not decide the trained model
    (``unkeyed()``: changing it neither retrains nor refuses a resume)."""
    module, cls = TRAIN_CONFIG
    _, node = _definition(module, cls)
    lines = []
    for n in node.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None:
            mark = " *" if isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "unkeyed" else ""
            lines.append(f"  {n.target.id} = {shown(_field_default(module, n.value))}{mark}")
    return ("config keys (model/train_config.py TrainConfig; key=value on the command line), with their defaults:\n"
            + "\n".join(lines) + "\n  * not part of the run's key: changing it neither retrains nor refuses a resume")
