"""Evaluation results as the report reads them: its rows (``rows``: each benchmark record's), the results files
(``load_results``, their shape checked: ``check_results_shape``), and the model x group table (``collect``)."""
from __future__ import annotations

import statistics
from pathlib import Path

from data_schemas import load_json

# the report's rows: (benchmark, group key, label, chance accuracy), in the order of the paper's tables — declared
# on each benchmark's record (``model.benchmarks.registry.REPORT_ROWS``) and handed in by the caller (the report
# stage, ``macco report``): pipeline never imports model
Rows = tuple[tuple[str, str, str, float], ...]


def chance_of(rows) -> dict[str, float]:
    """{row label: chance accuracy} of the report's rows."""
    return {name: chance for _, _, name, chance in rows}


def _n(bench: dict, key: str) -> int:
    """The cases the group pools (from the per-case string), else every case of the benchmark."""
    cases = bench.get("cases", {}).get(key)
    if cases is not None:
        return len(cases) - cases.count("x")
    return sum(v.get("n", 0) for v in bench["subsets"].values())


def collect(results: dict[str, list[dict]], rows: Rows) -> dict:
    """{model label: [eval json per seed]} -> {label: {row label: (mean, spread, n_seeds, n_cases)}}."""
    table: dict[str, dict] = {}
    for label, runs in results.items():
        cells = {}
        for bench, key, name, _ in rows:
            vals = [r["benchmarks"][bench]["groups"].get(key) for r in runs if bench in r["benchmarks"]]
            vals = [v for v in vals if v is not None]
            if not vals:
                continue
            n = _n(next(r for r in runs if bench in r["benchmarks"])["benchmarks"][bench], key)
            spread = statistics.stdev(vals) if len(vals) > 1 else 0.0
            cells[name] = (statistics.mean(vals), spread, len(vals), n)
        table[label] = cells
    return table


def _seed(run: dict, index: int) -> int:
    """A run's seed from its label (``name-s<seed>``, as the flow names runs), else its position."""
    import re

    m = re.search(r"-s(\d+)$", run.get("label", ""))
    return int(m.group(1)) if m else index


def _number(v) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_results_shape(benches: dict, path: Path, rows: Rows) -> None:
    """Raise ``ValueError`` naming the file and the key for anything the report would read that is not what
    ``macco eval`` writes: groups a mapping of finite numbers (or null), subsets a mapping of subsets with an
    integer ``n`` >= 0 and a finite (or null) accuracy, per-case strings of 1/0/x."""
    for name, b in benches.items():
        where = f"{path}: benchmarks.{name}"
        if not isinstance(b["groups"], dict):
            raise ValueError(f"{where}.groups: a mapping of group -> accuracy expected, got "
                             f"{type(b['groups']).__name__} {str(b['groups'])[:60]!r}")
        for bench, key, _, _ in rows:
            v = b["groups"].get(key) if bench == name else None
            if v is not None and not _number(v):
                raise ValueError(f"{where}.groups.{key}: {v!r} is not a finite number")
        subsets = b.get("subsets", {})
        if not isinstance(subsets, dict) or not all(isinstance(v, dict) for v in subsets.values()):
            raise ValueError(f"{where}.subsets: a mapping of subset -> {{n, correct, accuracy}} expected")
        for sub, v in subsets.items():
            for key in ("n", "missing_images"):
                n = v.get(key, 0)
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise ValueError(f"{where}.subsets.{sub}.{key}: {str(n)[:40]!r} is not a count")
            acc = v.get("accuracy")
            if acc is not None and not _number(acc):
                raise ValueError(f"{where}.subsets.{sub}.accuracy: {acc!r} is not a finite number")
        cases = b.get("cases", {})
        if not isinstance(cases, dict) or not all(isinstance(c, str) and set(c) <= set("01x")
                                                  for c in cases.values()):
            raise ValueError(f"{where}.cases: a mapping of group -> a string of 1/0/x per case expected")


# (label, path into a probe result, format): the rows of the probe table, then a gradient row per tower and term
PROBE_ROWS = [
    ("image: position R² x (global)", ("image_global", "r2_x"), "r2"),
    ("image: position R² y (global)", ("image_global", "r2_y"), "r2"),
    ("image: pair direction (global) %", ("image_global", "direction_acc"), "pct"),
    ("image: position R² x (patches)", ("image_patches", "r2_x"), "r2"),
    ("image: pair direction (patches) %", ("image_patches", "direction_acc"), "pct"),
    ("text: relation-swap cosine", ("text", "relation_swap_cosine"), "r2"),
    ("text: attribute-swap cosine", ("text", "attribute_swap_cosine"), "r2"),
    ("text: relation direction %", ("text", "direction_acc"), "pct"),
    ("text: bigram shift, word tokens %", ("text", "bigram_shift_tokens_acc"), "pct"),
    ("text: bigram shift, EOT %", ("text", "bigram_shift_eot_acc"), "pct"),
    ("recon: relation words %", ("reconstruction", "relation_acc"), "pct"),
    ("recon: relation words, captions' baseline %", ("reconstruction", "image_free", "relation_acc"), "pct"),
    ("recon: direction words %", ("reconstruction", "direction_acc"), "pct"),
    ("recon: direction words, captions' baseline %", ("reconstruction", "image_free", "direction_acc"), "pct"),
    ("recon: filler words %", ("reconstruction", "filler_acc"), "pct"),
    ("recon: filler words, captions' baseline %", ("reconstruction", "image_free", "filler_acc"), "pct"),
    ("recon: attribute words %", ("reconstruction", "attribute_acc"), "pct"),
    ("recon: attribute words, captions' baseline %", ("reconstruction", "image_free", "attribute_acc"), "pct"),
    ("retrieval i→t R@1 %", ("retrieval", "i2t_r1"), "pct"),
    ("retrieval t→i R@1 %", ("retrieval", "t2i_r1"), "pct"),
    ("zero-shot top-1 %", ("zeroshot_top1",), "pct"),
]

# the reconstruction terms' names in probe results written before they were renamed (read as the new names)
OLD_TERM_NAMES = {"text_reconstruction_loss": "mask_loss_text", "image_reconstruction_loss": "mask_loss_image"}


def probe_value(res: dict, path: tuple[str, ...]):
    for k in path:
        if isinstance(res, dict) and k not in res:
            k = OLD_TERM_NAMES.get(k, k)
        if not isinstance(res, dict) or k not in res:
            return None
        res = res[k]
    return res


def check_probes(probes, path: Path) -> None:
    """Every probe value the report reads (``PROBE_ROWS``, every tower's gradient norm per term) a finite number or
    absent: ``ValueError`` naming the file and the key (a string was a TypeError traceback in the mean)."""
    if probes is None:
        return
    if not isinstance(probes, dict):
        raise ValueError(f"{path}: probes: a mapping of probe -> results expected, got {type(probes).__name__}")
    grads = probes.get("gradient_norms")
    grads = grads if isinstance(grads, dict) else {}
    paths = [keys for _, keys, _ in PROBE_ROWS] + [("gradient_norms", term, tower) for term, towers in grads.items()
                                                    if isinstance(towers, dict) for tower in towers]
    for keys in paths:
        v = probe_value(probes, keys)
        if v is not None and not _number(v):
            raise ValueError(f"{path}: probes.{'.'.join(keys)}: {str(v)[:40]!r} is not a finite number")


def _missing_images(results: dict[str, list[dict]]) -> dict[str, dict[str, int]]:
    """{benchmark: {model: cases without an image}} of the runs scored with ``allow_missing``."""
    out: dict[str, dict[str, int]] = {}
    for label, runs in results.items():
        for r in runs:
            for b, res in r["benchmarks"].items():
                k = sum(v.get("missing_images", 0) for v in res.get("subsets", {}).values())
                if k:
                    out.setdefault(b, {})[label] = out.get(b, {}).get(label, 0) + k
    return out


def _dropped_groups(results: dict[str, list[dict]], rows: Rows) -> dict[str, list[str]]:
    """{report row: the models whose results hold its benchmark but no value for the group} — e.g. an ARO
    VG-Attribution macro with every group under ``vga_min_count`` cases, or a file with no scorable case: named
    in the report instead of left out silently."""
    out: dict[str, list[str]] = {}
    for bench, key, name, _ in rows:
        for label, runs in results.items():
            if any(bench in r["benchmarks"] and r["benchmarks"][bench]["groups"].get(key) is None for r in runs):
                out.setdefault(name, []).append(label)
    return out


PARTIAL_MARK = "†"  # a group averaged over part of its files (``allow_partial``): results.md, results.png


def partial_groups(results: dict[str, list[dict]], rows: Rows) -> dict[str, dict[str, list[str]]]:
    """{report row: {model: the files its group lacks}} for the groups an evaluation marks partial (the benchmark's
    ``missing_files``: averaged over the files present only); a model's seeds pooled."""
    out: dict[str, dict[str, list[str]]] = {}
    for bench, key, name, _ in rows:
        for label, runs in results.items():
            lacks = sorted({f for r in runs for f in r["benchmarks"].get(bench, {}).get("missing_files", {})
                            .get(key, [])})
            if lacks:
                out.setdefault(name, {})[label] = lacks
    return out


def partial_mismatches(results: dict[str, list[dict]], control: str, rows: Rows) -> dict[str, dict[str, list[str]]]:
    """{model: {report row: what it lacks beside the control}} where a model's group and the control's average
    different sets of files (one partial, the other complete, or partial differently): no paired test compares
    them (their cases are not the same), and the report says so."""
    partial = partial_groups(results, rows)
    out: dict[str, dict[str, list[str]]] = {}
    for name, models in partial.items():
        ref = models.get(control, [])
        for label in results:
            if label != control and models.get(label, []) != ref:
                out.setdefault(label, {})[name] = models.get(label, [])
    return out


def load_results(specs: list[str], rows: Rows) -> dict[str, list[dict]]:
    """``LABEL=PATH`` specs -> {label: [evaluation json per seed]} for ``write_report``. PATH is a results.json
    (``macco eval --out``, the evaluate stage) or the evaluate stage directory holding one; a label given more
    than once is several seeds of one model, each seed read from the run name in its json (``NAME-s<seed>``, as
    the flow names runs), else its position among the label's files."""
    results: dict[str, list[dict]] = {}
    files: dict[str, list[Path]] = {}
    for spec in specs:
        label, sep, path = (x.strip() for x in spec.partition("="))
        if not sep or not label or not path:
            raise ValueError(f"bad results spec {spec!r}: expected LABEL=PATH (a results.json or an evaluate "
                             "stage directory)")
        p = Path(path)
        if p.is_dir():
            p = p / "results.json"
        if not p.is_file():
            raise FileNotFoundError(f"{label}: no such file {p}")
        run = load_json(p)  # malformed, not UTF-8 or nested too deep: one line naming the file
        if isinstance(run, dict) and not isinstance(run.get("label", ""), str):
            raise ValueError(f"{p}: label: {str(run['label'])[:40]!r} is not a run name (text)")
        benches = run.get("benchmarks") if isinstance(run, dict) else None
        if not benches or not isinstance(benches, dict) or \
                not all(isinstance(b, dict) and "groups" in b for b in benches.values()):
            raise ValueError(f"{p}: not an evaluation results.json (needs benchmarks.<name>.groups, as macco eval "
                             "--out writes; a report's results.json is not one)")
        check_results_shape(benches, p, rows)
        check_probes(run.get("probes"), p)
        results.setdefault(label, []).append(run)
        files.setdefault(label, []).append(p)
    check_seeds(results, files)
    check_pairable(results, files)
    return results


def check_seeds(results: dict[str, list[dict]], files: dict[str, list]) -> None:
    """No model's seed given twice (``_seed``); ``ValueError`` naming the label, the seed and where each came from."""
    for label, runs in results.items():
        seeds = [_seed(r, i) for i, r in enumerate(runs)]
        twice = [s for s in dict.fromkeys(seeds) if seeds.count(s) > 1]
        if twice:
            same = [str(f) for f, s in zip(files[label], seeds) if s == twice[0]]
            raise ValueError(f"{label}: seed {twice[0]} given more than once ({', '.join(same)})")


def check_pairable(results: dict[str, list[dict]], files: dict[str, list]) -> None:
    """Every model's per-case string of a group has the same length (the paired tests compare case by case: two
    lengths are two different sets of cases); ``ValueError`` naming both files and the group."""
    first: dict[tuple[str, str], tuple[int, Path]] = {}
    for label, runs in results.items():
        for run, path in zip(runs, files[label]):
            for bench, b in run["benchmarks"].items():
                for group, cases in b.get("cases", {}).items():
                    n0, p0 = first.setdefault((bench, group), (len(cases), path))
                    if len(cases) != n0:
                        raise ValueError(f"{path}: benchmarks.{bench}.cases.{group} has {len(cases)} cases, {p0} has "
                                         f"{n0}: not evaluations of the same benchmark files (no paired test)")
