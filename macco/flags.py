"""Command-line flags derived from the stage config dataclasses: a flag's default, type and choices are its
field's (``data_schemas.config``), so the CLI never copies a default; ``config_from_args`` builds the config
through the same ``from_dict`` as the flow's YAML sections."""
from __future__ import annotations

import argparse
import typing

from data_schemas.config import choices, defaults, from_dict, value_type


def add_flags(parser: argparse.ArgumentParser, cls, names, *, help: dict | None = None,
              flag: dict | None = None, unset: tuple[str, ...] = ()) -> None:
    """``--<field>`` for each of ``names`` (``flag`` renames one, e.g. ``{"clip_model": "--model"}``; ``help``
    gives one its text). A ``Literal`` field gets its choices, a bool one ``--x`` (``--no-x`` when it defaults to
    true), a tuple/list ``nargs="+"``. ``unset``: flags whose default is None (the caller decides; its help says
    how)."""
    help, flag, dflt = help or {}, flag or {}, defaults(cls)
    for name in names:
        kw: dict = {"dest": name, "default": None if name in unset else dflt[name]}
        allowed, t = choices(cls, name), value_type(cls, name)
        if allowed is not None:
            kw["choices"] = allowed
        elif t is bool:
            kw["action"] = argparse.BooleanOptionalAction if dflt[name] or name in unset else "store_true"
        elif typing.get_origin(t) in (tuple, list):
            args = [a for a in typing.get_args(t) if a is not Ellipsis]
            kw.update(nargs="+", type=args[0] if args and args[0] in (int, float) else str)
            kw["default"] = list(dflt[name])
        elif t in (int, float):
            kw["type"] = t
        shown = "(default: %(default)r)" if isinstance(dflt[name], str) else "(default: %(default)s)"
        text = help.get(name, "")
        kw["help"] = text if "default" in text or kw.get("action") == "store_true" or name in unset else \
            f"{text} {shown}".strip()
        parser.add_argument(flag.get(name, "--" + name.replace("_", "-")), **kw)


def config_from_args(cls, args: argparse.Namespace, names, section: str, **fixed):
    """The config ``cls`` from the parsed flags ``names`` plus ``fixed`` values (checked by ``from_dict``)."""
    return from_dict(cls, {n: getattr(args, n) for n in names}, section, **fixed)
