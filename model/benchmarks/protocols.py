"""Evaluation protocols: which published procedure a benchmark run follows, and the completeness rule for groups.

``protocol="authors"`` follows each benchmark's own harness; ``protocol="macco"`` follows the official MACCO
evaluation scripts (hiker-lw/MACCO ``eval/``). The protocol only sets defaults: an explicit ``aro_exclusion``,
``vlc_mode`` or image root always wins. Every choice is recorded in a benchmark's ``settings``.

A group average (VL-CheckList ``attribute``, SugarCrepe ``object``, VALSE ``avg``, ...) over an incomplete set of
its files is refused with :class:`IncompleteGroup`, unless ``allow_partial`` (then the result carries
``"partial": true`` and the missing files).
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from data_schemas import InputFileError

Protocol = Literal["authors", "macco"]
Activation = Literal["auto", "quickgelu", "gelu"]
VlcMode = Literal["authors", "all", "macco"]
AroExclusion = Literal["aro_notebook", "macco"]
PROTOCOLS, ACTIVATIONS, VLC_MODES, ARO_EXCLUSIONS = (get_args(t) for t in (Protocol, Activation, VlcMode, AroExclusion))
ORDER_BENCHMARKS = ("coco-order", "flickr-order")

# what each protocol sets when the user leaves the setting unset (None); MACCO's scripts reload every checkpoint
# as ViT-B-32 with nn.GELU, so its protocol evaluates with GELU
DEFAULTS = {"authors": {"aro_exclusion": "aro_notebook", "vlc_mode": "authors", "activation": "auto"},
            "macco": {"aro_exclusion": "macco", "vlc_mode": "macco", "activation": "gelu"}}


class IncompleteGroup(InputFileError):
    """A group average whose files are not all present (or have no scored case)."""


def check_choice(field: str, value, choices) -> None:
    if value not in choices:
        raise InputFileError(f"evaluate setting {field}={value!r}: choose from {', '.join(map(str, choices))}")


def protocol_default(protocol: str, field: str):
    check_choice("protocol", protocol, PROTOCOLS)
    return DEFAULTS[protocol][field]


def order_image_root(name: str, root: Path, protocol: str, explicit: dict) -> Path:
    """Where an Order benchmark's ``image`` fields are joined. ARO's ``dataset_zoo/aro_datasets.py`` joins
    ``<root>/<image>`` for both (COCO :228/:247, Flickr :327); MACCO's ``eval/evaluate_aro_order.py`` joins COCO
    images under the ARO root's sibling ``coco/`` (:115/:134) and Flickr under ``<root>/flickr30k-images/`` (:192)."""
    if name in explicit:
        return Path(explicit[name])
    if protocol == "macco":
        return root.parent / "coco" if name == "coco-order" else root / "flickr30k-images"
    return root


def normalise_dataset(name: str) -> str:
    """VALSE's ``dataset`` field spells one source several ways (``coco2017`` / ``coco_2017``): compare
    lower-cased with ``_``, ``-`` and spaces removed."""
    return "".join(ch for ch in str(name).lower() if ch not in "_- ")


def parse_image_roots(items) -> tuple[dict[str, str], dict[str, str]]:
    """``NAME=DIR`` strings -> (order_image_roots, valse_image_roots). ``coco-order`` / ``flickr-order`` name an
    Order benchmark's image directory; any other NAME is a VALSE ``dataset`` value (normalised)."""
    order, valse = {}, {}
    for item in items or ():
        name, sep, path = str(item).partition("=")
        if not sep or not name.strip() or not path.strip():
            raise InputFileError(f"--image-root {item!r}: expected NAME=DIR (e.g. coco2017=/data/coco/val2017)")
        name = name.strip()
        if name in ORDER_BENCHMARKS:
            order[name] = path.strip()
        else:
            valse[normalise_dataset(name)] = path.strip()
    return order, valse


def missing_by_group(expected: dict[str, list[str]], present) -> dict[str, list[str]]:
    """{group: files of the group not in ``present``} for groups with some but not all files present.
    A group with none of its files present is not averaged at all (its value is None), so it is not partial."""
    present = set(present)
    out = {}
    for g, files in expected.items():
        miss = [f for f in files if f not in present]
        if miss and len(miss) < len(files):
            out[g] = miss
    return out


def check_complete(benchmark: str, expected: dict[str, list[str]], present, allow_partial: bool,
                   what: str = "file") -> dict[str, list[str]]:
    """Raise :class:`IncompleteGroup` (one line naming every missing file) unless ``allow_partial``; return the
    missing files per group."""
    miss = missing_by_group(expected, present)
    if miss and not allow_partial:
        parts = [f"{g!r} lacks {', '.join(m)}" for g, m in sorted(miss.items())]
        raise IncompleteGroup(f"{benchmark}: group average over an incomplete set of {what}s: {'; '.join(parts)} "
                              f"(--allow-partial reports it marked partial)")
    return miss


# the synthetic world's benchmark sets (pipeline/world_benchmarks.py) hold a few files of each benchmark and small
# VG-Attribution groups: what an evaluation on them uses unless told otherwise (the flow and ``macco eval --world``)
WORLD_SETTINGS = {"vga_min_count": 5, "allow_partial": True}
