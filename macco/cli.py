"""``macco``: one verb per stage. Each verb calls a pure stage function (or, for ``run``, the Prefect flow)."""
# The verbs live in three sibling modules, each with its parsers (``add_parsers``) and its ``cmd_*`` functions:
# commands_data (making the tables), commands_tables (reading them), commands_model (train, eval, probe, run).
from __future__ import annotations

import argparse
import errno
import os
import re
import sys

from . import set_offline_env
from .commands_data import add_parsers as _data_parsers
from .commands_model import add_parsers as _model_parsers
from .commands_tables import add_parsers as _tables_parsers


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="macco", description=__doc__)
    sub = p.add_subparsers(dest="verb", required=True)
    _data_parsers(sub)  # world, captions, parse, ground, masks, show-masks (macco/commands_data.py)
    _tables_parsers(sub)  # validate, inspect, sql, agreement, report (macco/commands_tables.py)
    _model_parsers(sub)  # train, eval, probe, run (macco/commands_model.py)
    _plain_help(p)
    return p


def plain(text: str | None) -> str | None:
    """Help text without reStructuredText markup (the docstrings' ````x````, ``:class:`x```): the words alone."""
    if not text:
        return text
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]+)``", r"\1", text)


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Every description, epilog and help of ``parser`` and its verbs as ``plain`` text (``--help`` and the CLI
    reference, docs/gen_cli.py, show no markup)."""
    parser.description, parser.epilog = plain(parser.description), plain(parser.epilog)
    for action in parser._actions:
        action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help)
            for verb in action.choices.values():
                _plain_help(verb)


# a read-only or full disk, a quota, a file-size limit (ulimit -f), a folder without permission
USER_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _input_errors() -> tuple[type[BaseException], ...]:
    """What main() reports as one line: the project's input errors (malformed files, missing or damaged
    tables: ``InputFileError`` and its ``TableError``), config errors (``ConfigError``) and missing files. Other
    exceptions are bugs and keep their traceback. Imported when an exception is being handled, so a plain
    ``--help`` stays light."""
    from data_schemas import InputFileError
    from data_schemas.config import ConfigError

    return (InputFileError, ConfigError, FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    set_offline_env()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int((args.fn(args, extra) if getattr(args, "takes_extra", False) else args.fn(args)) or 0)
    except _input_errors() as exc:
        print(f"macco {args.verb}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except OSError as exc:  # a read-only or full disk, a folder without permission: the user's, not a bug
        if exc.errno not in USER_ERRNOS:
            raise
        where = f"{exc.filename}: " if exc.filename else ""  # pyarrow's writes name no file
        print(f"macco {args.verb}: {where}{exc.strerror or os.strerror(exc.errno)} (errno {exc.errno}): give a "
              "writable output folder with room to write (and no file-size limit, ulimit -f)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())