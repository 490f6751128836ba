"""Typed stage configs: one ``from_dict`` for every stage's dataclass (the config file's sections, ``key=value``
overrides and the CLI's flags all pass through it).

A field's annotation is its schema: ``str``, ``int``, ``float``, ``bool``, ``dict``, ``tuple[...]``/``list[...]``,
``X | None`` and ``Literal[...]`` for the enum-like options. Unknown keys, wrong types and values outside a
``Literal`` are errors naming the section, the key and what is allowed — never a silent fallback. YAML 1.1 reads
``on``/``off``/``yes``/``no`` as booleans: a ``Literal`` with ``"on"``/``"off"`` takes them back, any other string
field refuses them (quote the value).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from functools import lru_cache
from typing import Any, Literal, Mapping, TypeVar

T = TypeVar("T")


def shown(value, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error message never prints an unbounded value (a YAML alias
    bomb's expansion, a megabyte string); a container too large to print cheaply is described, not printed."""
    if isinstance(value, (list, tuple, dict, set)) and not _small(value):
        return f"<a {type(value).__name__} of {len(value)} items, too large to show>"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _small(value, budget: list | None = None) -> bool:
    """Whether a nested container has at most 200 items in all (so its repr is cheap)."""
    budget = budget if budget is not None else [200]
    for item in (value.values() if isinstance(value, dict) else value):
        budget[0] -= 1
        if budget[0] < 0 or isinstance(item, (list, tuple, dict)) and not _small(item, budget):
            return False
    return True


class ConfigError(ValueError):
    """A config value, key or file that cannot be used: the message names the file or section, the key and what is
    allowed. ``macco`` prints it as one line (exit 2); the flow fails with it as its one-line message."""


class RangeError(ConfigError):
    """A value out of its range (``check_ranges``); ``from_dict`` names its own section in front of ``detail``."""

    def __init__(self, section: str, detail: str):
        super().__init__(f"{section} {detail}")
        self.detail = detail


class _UniqueKeyLoader:
    """Built on first use (yaml is imported lazily): a SafeLoader refusing a key written twice in one mapping."""
    cls = None

    @classmethod
    def get(cls):
        if cls.cls is None:
            import yaml

            class Loader(yaml.SafeLoader):
                def construct_mapping(self, node, deep=False):
                    seen: dict = {}
                    for key_node, _ in node.value:
                        key = self.construct_object(key_node, deep=True)
                        line = key_node.start_mark.line + 1
                        if key != "<<" and key in seen:
                            raise ConfigError(f"{self.name}: line {line}: key {shown(key)} is written twice in one mapping "
                                              f"(first on line {seen[key]}); the second would silently replace the "
                                              "first: merge them")
                        seen[key] = line
                    return super().construct_mapping(node, deep)

                def compose_node(self, parent, index):
                    # the composer recurses per level: [[[...]]] 400 deep was a RecursionError traceback
                    self.depth = getattr(self, "depth", 0) + 1
                    try:
                        if self.depth > MAX_CONFIG_DEPTH:
                            line = self.peek_event().start_mark.line + 1
                            raise ConfigError(f"{self.name}: line {line}: nested deeper than {MAX_CONFIG_DEPTH} "
                                              "levels of mappings and lists; a config is far shallower: refused")
                        return super().compose_node(parent, index)
                    finally:
                        self.depth -= 1

            cls.cls = Loader
        return cls.cls


MAX_CONFIG_VALUES = 100_000  # a config's values once its YAML aliases are expanded (a "billion laughs" is refused)
# the UTF-8 bytes of its scalars once expanded: one 200 KB string repeated by 50,000 aliases is 50,001 values but
# 10 GB of text (the flow's keys serialise it); a config file is kilobytes
MAX_CONFIG_BYTES = 16 * 2**20
MAX_CONFIG_DEPTH = 64  # nesting of mappings and lists, aliases expanded (a deeper one exhausted Python's recursion)


def _expanded_size(node, name: str) -> tuple[int, int]:
    """(values, scalar bytes) of the YAML node graph once every alias is expanded, counted without expanding it (an
    alias is a second reference to a node: each node is counted once, memoised), each capped just past its limit;
    nesting past ``MAX_CONFIG_DEPTH`` once expanded (an alias referring to a node it is inside, too) is a
    ``ConfigError`` (the recursion here never goes deeper than that)."""
    import yaml

    memo: dict[int, tuple[int, int, int]] = {}  # id -> (values, bytes, height)

    def count(n, depth: int) -> tuple[int, int, int]:
        if id(n) in memo:
            values, size, height = memo[id(n)]
        else:
            if depth > MAX_CONFIG_DEPTH:
                raise ConfigError(f"{name}: line {n.start_mark.line + 1}: nested deeper than {MAX_CONFIG_DEPTH} "
                                  "levels once its aliases are expanded (or an alias inside the node it names): "
                                  "refused")
            values, size, height = 1, 0, 1
            if isinstance(n, yaml.ScalarNode):
                size = len(n.value.encode("utf-8", "surrogatepass"))
            else:
                children = [c for kv in n.value for c in kv] if isinstance(n, yaml.MappingNode) else n.value
                for c in children:
                    cv, cs, ch = count(c, depth + 1)
                    values, size, height = values + cv, size + cs, max(height, ch + 1)
            memo[id(n)] = values, size, height = \
                min(values, MAX_CONFIG_VALUES + 1), min(size, MAX_CONFIG_BYTES + 1), height
        if depth + height - 1 > MAX_CONFIG_DEPTH:
            raise ConfigError(f"{name}: line {n.start_mark.line + 1}: nested deeper than {MAX_CONFIG_DEPTH} levels "
                              "once its aliases are expanded: refused")
        return values, size, height

    values, size, _ = count(node, 1)
    return values, size


def load_yaml(path) -> Any:
    """A YAML config file: ``ConfigError`` (naming file and line) for malformed YAML and for a key written twice in
    one mapping (a section given twice would otherwise silently replace the first); a missing file is
    ``FileNotFoundError``; the file, its expanded size (``MAX_CONFIG_VALUES`` values, ``MAX_CONFIG_BYTES``) and its
    nesting (``MAX_CONFIG_DEPTH``) are bounded, before any stage reads it."""
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: config file not found")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {path.stat().st_size:,} bytes, over the {MAX_CONFIG_BYTES:,} a config may hold: "
                          "refused")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save the config as UTF-8") from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, name: str) -> Any:
    """YAML text (a file's, or a ``key=value`` override's value) as ``load_yaml`` reads it; ``name`` says where."""
    import yaml

    path = name
    loader = _UniqueKeyLoader.get()(text)
    loader.name = name
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        values, size = _expanded_size(node, path)
        if values > MAX_CONFIG_VALUES:
            raise ConfigError(f"{path}: the YAML expands to more than {MAX_CONFIG_VALUES:,} values (aliases "
                              "repeating aliases); a config holds far fewer: refused")
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: the YAML expands to more than {MAX_CONFIG_BYTES:,} bytes of text (aliases "
                              "repeating a long value); a config holds far less: refused")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
    finally:
        loader.dispose()


@lru_cache(maxsize=None)
def field_types(cls) -> dict[str, Any]:
    """{field name: resolved annotation} of a config dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _members(t) -> tuple:
    """The alternatives of a union annotation (``X | None``), or ``(t,)``."""
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        return typing.get_args(t)
    return (t,)


def choices(cls, name: str) -> tuple | None:
    """The allowed values of an enum-like (``Literal``) field, None for other fields."""
    for m in _members(field_types(cls)[name]):
        if typing.get_origin(m) is Literal:
            return typing.get_args(m)
    return None


def value_type(cls, name: str):
    """The field's annotation without ``None``: a type, ``Literal[...]``, or a generic alias."""
    ms = [m for m in _members(field_types(cls)[name]) if m is not type(None)]
    return ms[0] if len(ms) == 1 else typing.Union[tuple(ms)]


def check_choices(obj, section: str) -> None:
    """Every ``Literal`` field of the dataclass instance ``obj`` holds an allowed value (``__post_init__``)."""
    for f in dataclasses.fields(obj):
        allowed = choices(type(obj), f.name)
        value = getattr(obj, f.name)
        if allowed is not None and value not in allowed and not (value is None and _optional(type(obj), f.name)):
            raise ConfigError(f"{section} {f.name}: {shown(value)} is not one of {list(allowed)}")


def _optional(cls, name: str) -> bool:
    return type(None) in _members(field_types(cls)[name])


def coerce(cls, name: str, value, section: str):
    """``value`` (from YAML, JSON or a command line) as field ``name``'s type; an error names section and key."""
    if value is None:
        if not _optional(cls, name):
            raise ConfigError(f"{section} {name}: None is not allowed ({_describe(field_types(cls)[name])})")
        return None
    want = value_type(cls, name)
    allowed = choices(cls, name)
    if allowed is not None:
        if isinstance(value, bool):  # YAML 1.1 read on/off as a boolean
            if "on" in allowed:
                return "on" if value else "off"
            raise ConfigError(f"{section} {name}: YAML read {shown(value)} as a boolean; quote the value")
        if isinstance(value, (int, float)) and all(isinstance(a, str) for a in allowed):
            value = str(value)  # e.g. captions_per_image: 1
        if value not in allowed:
            raise ConfigError(f"{section} {name}: {shown(value)} is not one of {list(allowed)}")
        return value
    try:
        return _as(want, value, name, section)
    except (TypeError, ValueError, OverflowError) as exc:
        if str(exc).startswith(f"{section} {name}:"):
            raise
        raise ConfigError(f"{section} {name}: {shown(value)} is not a valid {_describe(field_types(cls)[name])}") \
            from exc


def _as(want, value, name: str, section: str):
    origin = typing.get_origin(want)
    if origin in (typing.Union, types.UnionType):  # e.g. str | list[str]: the first alternative that takes it
        for m in typing.get_args(want):
            try:
                return _as(m, value, name, section)
            except (TypeError, ValueError, OverflowError):
                continue
        raise ValueError(value)
    if want is str:
        if isinstance(value, bool):
            raise ConfigError(f"{section} {name}: YAML read {shown(value)} as a boolean; quote the value")
        if not isinstance(value, (str, int, float)):
            raise TypeError(value)
        return str(value)
    if want is bool:
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise TypeError(value)
        return value
    if want is int:
        if isinstance(value, bool):
            raise TypeError(value)
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass  # "1e3": through float below
        f = float(value)
        if f != int(f):
            raise ValueError(value)
        return int(f)
    if want is float:
        if isinstance(value, bool):
            raise TypeError(value)
        return float(value)  # YAML 1.1 reads 1e-4 (no dot) as a string
    if want is dict or origin is dict:
        if not isinstance(value, Mapping):
            raise TypeError(value)
        return dict(value)
    if origin in (tuple, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise TypeError(value)
        args = [a for a in typing.get_args(want) if a is not Ellipsis]
        items = [_as(args[min(i, len(args) - 1)], v, name, section) if args else v for i, v in enumerate(value)]
        if origin is tuple and args and Ellipsis not in typing.get_args(want) and len(items) != len(args):
            raise ValueError(value)
        return tuple(items) if origin is tuple else items
    return value


def _describe(t) -> str:
    return getattr(t, "__name__", None) if isinstance(t, type) else str(t).replace("typing.", "")


def from_dict(cls: type[T], data: Mapping | None, section: str, **fixed) -> T:
    """The dataclass ``cls`` from a mapping: unknown keys rejected (the known ones listed), each value coerced to
    its field's type, ``Literal`` values checked; ``fixed`` values are set as given (paths the caller decides)."""
    data = dict(data or {})
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{section}: unknown key(s) {unknown}; known: {sorted(known)}")
    taken = sorted(set(data) & set(fixed))
    if taken:
        raise ConfigError(f"{section}: {taken} cannot be set here (the caller sets them)")
    try:
        return cls(**{k: coerce(cls, k, v, section) for k, v in data.items()}, **fixed)
    except RangeError as exc:  # raised by the dataclass's __post_init__ under its own section name
        raise RangeError(section, exc.detail) from None


def defaults(cls) -> dict:
    """{field: default} of a config dataclass (factories called; fields without a default left out)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


# ---- value ranges (every config dataclass's __post_init__) -----------------------------------------------
_RULES = {
    "positive": (lambda v: v > 0, "must be > 0"),
    "non_negative": (lambda v: v >= 0, "must be >= 0"),
    "probability": (lambda v: 0 <= v <= 1, "must be in [0, 1]"),
}


# ---- the fields that do not decide the output --------------------------------------------------------------------
UNKEYED = "unkeyed"  # the field-metadata flag (``unkeyed()``)


def unkeyed(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """A config field that does not decide the output (where files are, how the work is spread, logged, saved or
    run): the one flag read by the stage key, the training resume check and the shard fingerprint (``keyed``)."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={UNKEYED: True})


def keyed_fields(cls) -> tuple[str, ...]:
    """The fields of a config dataclass (or instance) that decide its output: all but the ``unkeyed`` ones."""
    return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get(UNKEYED))


def keyed(value) -> Any:
    """``value`` as key data: a config dataclass as a dict of its ``keyed_fields``, at every level."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: keyed(getattr(value, name)) for name in keyed_fields(value)}
    if isinstance(value, dict):
        return {k: keyed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [keyed(v) for v in value]
    return value


def check_ranges(obj, section: str, **rules: tuple[str, ...]) -> None:
    """Every named field of ``obj`` in its range: ``positive=("batch_size", ...)``, ``non_negative=(...)``,
    ``probability=(...)``; a field that is None is not checked, a tuple/list field is checked item by item, a dict
    field value by value. Raises ``ValueError`` naming the section, the key and the rule (a config error)."""
    import math

    for rule, names in rules.items():
        ok, what = _RULES[rule]
        for name in names:
            value = getattr(obj, name)
            items = value.items() if isinstance(value, dict) else \
                ((f"[{i}]", v) for i, v in enumerate(value)) if isinstance(value, (tuple, list)) else [("", value)]
            for sub, v in items:
                if v is None:
                    continue
                key = f"{name}.{sub}" if isinstance(value, dict) else f"{name}{sub}"
                if isinstance(v, float) and not math.isfinite(v):  # inf passed "> 0" and died at step 0
                    raise RangeError(section, f"{key}: {shown(v)} must be finite")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(v):
                    raise RangeError(section, f"{key}: {shown(v)} {what}")


def safe_name(value, what: str) -> str:
    """``value`` as a single path component (a run name, a config name, a table name under a folder): a name
    with a separator, ``..``, a NUL or an absolute path would write outside the folder it is joined to."""
    if not isinstance(value, str) or not value or value in (".", "..") or value.startswith(".") or \
            any(c in value for c in "/\\\0") or len(value) > 200:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise ConfigError(f"{what}: {shown} is not a plain name (one path component: letters, digits, '-', '_', "
                          "'.'; no '/', no leading '.', at most 200 characters)")
    return value
