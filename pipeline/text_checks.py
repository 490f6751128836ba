"""The text rules every caption reader applies (``pipeline.captions``, ``pipeline.sources``, the parser): whether a
caption is worth keeping (``caption_problem``) and whether a string, or every key and string of a JSON value, can be
stored (``unicode_problem``: Parquet and JSON output are UTF-8); ``shown`` writes any text as valid Unicode for a
message. Pure functions on values, no files: one place, so every source refuses the same items for the same reason.
"""
from __future__ import annotations

# the longest caption a source keeps: CLIP reads 77 tokens (about 60 words, a few hundred characters); a longer
# "caption" is a document, not a caption (spaCy refuses a text over 1,000,000 characters, E088)
MAX_CAPTION_CHARS = 2000


def shown(text) -> str:
    """``text`` as valid Unicode for a message: a lone surrogate written as its escape (``\\udcff``), so an error row
    naming a bad name or path can itself be stored (Parquet strings are UTF-8)."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def unicode_problem(value, what: str, *, name: bool = False) -> tuple[str, str] | None:
    """The one rule every reader applies to the strings a source gives (None: all valid): a string, or a JSON value
    with every key and string inside it. A lone surrogate cannot be stored (Parquet and JSON output are UTF-8):
    ``invalid_unicode`` for text (``"\\ud800"`` in JSON: an emoji cut in half), ``not_utf8`` for a ``name`` (a
    file or tar member name, whose bytes that are not UTF-8 Python decodes as U+DC80..U+DCFF). ``what`` names the
    value in the message (e.g. ``FILE: line 3:``); the message adds where in it (``['caption']``, ``key``)."""
    if _all_unicode(value):  # the common case, without building the places of every string
        return None
    todo = [(value, "")]
    while todo:
        v, where = todo.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as exc:
                c, i, at = ord(v[exc.start]), exc.start, f"{what} {where}".strip()
                if name and 0xDC80 <= c <= 0xDCFF:
                    return "not_utf8", (f"{at} {v[:80]!r} is not UTF-8 (byte 0x{c - 0xDC00:02x} at character {i}); "
                                        "rename it in UTF-8")
                return "invalid_unicode", (f"{at} is not valid Unicode: a lone surrogate U+{c:04X} at character {i} "
                                           f"(half of a character, e.g. an emoji cut in two) in {v[:80]!r}")
        elif isinstance(v, dict):  # pushed in reverse: the first bad string in file order is the one named
            for k, x in reversed(v.items()):
                todo += [(x, f"{where}[{shown(k)!r}]"), (k, f"{where} key".strip())]
        elif isinstance(v, (list, tuple)):
            todo += [(x, f"{where}[{i}]") for i, x in reversed(list(enumerate(v)))]
    return None


def _all_unicode(value) -> bool:
    """Whether every string in ``value`` (keys included) encodes as UTF-8; ASCII ones are not encoded at all."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        elif isinstance(v, dict):
            todo += v.keys()
            todo += v.values()
        elif isinstance(v, (list, tuple)):
            todo += v
    return True


def caption_problem(text) -> tuple[str, str] | None:
    """The one rule every source applies to a caption's text (None: keep it, stripped): ``non_text_caption`` (not a
    string), ``invalid_unicode`` (a lone surrogate, ``unicode_problem``), ``empty_caption`` (empty or whitespace),
    ``caption_too_long`` (over ``MAX_CAPTION_CHARS`` characters), ``control_character`` (a control character other
    than tab, newline and carriage return, e.g. NUL: it would be stored and parsed as a word), ``no_words`` (no
    letter or digit: punctuation alone has nothing to parse)."""
    import unicodedata

    if text is not None and not isinstance(text, str):
        return "non_text_caption", f"caption must be text, got {type(text).__name__}"
    if text is not None and (bad := unicode_problem(text, "caption")) is not None:
        return bad
    if text is None or not text.strip():
        return "empty_caption", "empty caption"
    if len(text) > MAX_CAPTION_CHARS:
        return "caption_too_long", f"caption of {len(text):,} characters (at most {MAX_CAPTION_CHARS:,})"
    bad = next(((i, c) for i, c in enumerate(text) if c not in "\t\n\r" and unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        return "control_character", f"control character U+{ord(bad[1]):04X} at character {bad[0]} of the caption"
    if not any(c.isalnum() for c in text):
        return "no_words", f"caption without a letter or digit: {text.strip()[:40]!r}"
    return None
