"""The hard-negative captions of a training run in modes ``negclip``, ``ce-clip`` and MACCO stacked on each
(``train_config.HARDNEG_STYLES``): made once per run, before the model is built, from the ``scene_graphs`` table
the run reads (``model.negatives.make_negatives``, seeded by the run's seed: the same tables and seed give the
same negatives, so a resumed run trains on the ones it started with), one slot per kind of the style with a
validity mask, tokenized with the run's tokenizer (``MaccoDataset``).

A slot with no negative holds ``PLACEHOLDER`` and is marked invalid: NegCLIP's loss never sees it (the dataset draws
one of the caption's valid negatives per step; a caption with none has no column), CE-CLIP's rank loss masks it
and its contrast and IMC see the placeholder as a column, as their code does with its '###' caption. The counts
(captions with and without a negative, by reason; each kind made or missing, by reason) go to the run's
``summary.json`` (``samples.hard_negatives``) and its notes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PLACEHOLDER = "###"  # CE-CLIP's caption in a slot with no negative (their data's '###')


@dataclass
class HardNegatives:
    """Per training sample (in ``build_samples``' order): its K slots' texts (``PLACEHOLDER`` where missing) and
    validity; ``kinds`` the slots' kinds; ``summary`` the counts."""
    style: str
    kinds: tuple[str, ...]
    texts: list[list[str]]
    valid: list[list[bool]]
    summary: dict


def build_hard_negatives(tables: dict[str, Path], samples: list, style: str, seed: int) -> HardNegatives:
    """The negatives of ``samples`` (``model.data.Sample``) from the run's captions and scene_graphs tables."""
    from data_schemas import TABLES, read_table
    from .negatives import make_negatives  # pure (no torch): the one place negatives are made

    if "negative_captions" in tables:
        return given_negatives(tables["negative_captions"], samples, style)
    wanted = {s.caption_id for s in samples}
    text = {r["caption_id"]: r["caption"] for r in read_table(TABLES["captions"], tables["captions"]).to_pylist()
            if r["caption_id"] in wanted}
    rows = [r for r in read_table(TABLES["scene_graphs"], tables["scene_graphs"]).to_pylist()
            if r["caption_id"] in wanted]
    result = make_negatives([{"caption_id": s.caption_id, "caption": text[s.caption_id]} for s in samples], rows,
                            style=style, seed=seed)
    texts, valid = [], []
    for r in result.results:
        slots, ok = r.slots(result.kinds)
        texts.append([t if t is not None else PLACEHOLDER for t in slots])
        valid.append(ok)
    return HardNegatives(style, result.kinds, texts, valid, {"style": style, **result.summary()})


def given_negatives(path: Path, samples: list, style: str) -> HardNegatives:
    """The negatives a training file gives (table ``negative_captions``: NegCLIP's ``neg_caption`` lists, read as
    given): one slot per list entry, as many slots as the longest list, the rest ``PLACEHOLDER`` and invalid; the
    dataset draws one valid entry per step (NegCLIP's ``random.choice``). A blank entry is no negative (counted,
    ``blank_dropped``). Style negclip only (``check_tables``)."""
    from data_schemas import TABLES, read_table

    given = {r["caption_id"]: r["negatives"] for r in read_table(TABLES["negative_captions"], path).to_pylist()}
    lists = [[t for t in given.get(s.caption_id, []) if t.strip()] for s in samples]
    k = max(1, *(len(x) for x in lists)) if lists else 1
    texts = [x + [PLACEHOLDER] * (k - len(x)) for x in lists]
    valid = [[i < len(x) for i in range(k)] for x in lists]
    none = sum(not x for x in lists)
    not_listed = sum(s.caption_id not in given for s in samples)
    reasons = {r: n for r, n in (("not_in_file", not_listed), ("empty_list", none - not_listed)) if n}
    return HardNegatives(style, tuple(f"given_{i}" for i in range(k)), texts, valid,
                         {"style": style, "source": "negative_captions", "captions": len(samples),
                          "with_negatives": len(samples) - none, "without_negatives": none,
                          "without_negatives_by_reason": reasons, "made": {"given": sum(map(len, lists))},
                          "blank_dropped": sum(len(given.get(s.caption_id, [])) for s in samples) -
                          sum(map(len, lists)), "missing": {}})


def summary_note(mode: str, s: dict) -> str:
    """One line for the run's notes from ``HardNegatives.summary``: how many captions have a negative, the others
    by reason."""
    why = ", ".join(f"{k} {v}" for k, v in s["without_negatives_by_reason"].items()) or "none"
    made = ", ".join(f"{k} {v}" for k, v in s["made"].items())
    return (f"train {mode}: {s['with_negatives']} of {s['captions']} captions have a hard negative ({s['style']} "
            f"style; made: {made}); without one: {s['without_negatives']} ({why}), their slots masked")
