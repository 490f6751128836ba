"""The GPU run's markdown: one section per measurement, from the sections' raw rows (``run.py`` collects them)."""
from __future__ import annotations

import json
import math

ORDER = ("env", "train", "compile", "loader", "ground", "eval", "e2e")
TITLES = {"env": "Machine and packages", "train": "Training steps (eager)", "compile": "Training steps (torch.compile)",
          "loader": "Data loader", "ground": "Grounding: batched vs per image", "eval": "Evaluation throughput",
          "e2e": "End to end: macco train and its export"}
# seconds per section (a box), and the whole run's budget; the device call's own limit is 600 s


def _f(x, nd: int = 1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def section_rows(sec: dict, kind: str = "row") -> list[dict]:
    return [ln for ln in sec["lines"] if ln["kind"] == kind]


def _skips(sec: dict, expected: int | None = None) -> list[str]:
    out = [f"skipped: {s['what']}: {s['reason']}" for s in section_rows(sec, "skip")]
    done = len(section_rows(sec)) + len(section_rows(sec, "skip"))
    if sec["status"] == "timeout":
        left = f" ({expected - done} of {expected} measurements not reached)" if expected else ""
        shared = f", shared by {', '.join(sec['shared_with'])}," if sec.get("shared_with") else ""
        out.append(f"skipped: time box of {sec['box']:.0f} s{shared} reached{left}")
    elif sec["status"] == "not reached":
        out.append(f"skipped: not reached: {sec['reason']}")
    elif sec["status"] != "ok":
        out.append(f"skipped: the section failed: {sec['reason'] or 'see gpu_results.json log_tail'}")
    return out


def render(secs: dict[str, dict], meta: dict) -> str:
    env = next(iter(section_rows(secs["env"], "env")), {}) if "env" in secs else {}
    L = [f"# GPU run ({meta['date']}, {meta['mode']} sizes)", "",
         f"Machine: {env.get('device', '?')}"
         + (f" (compute {env['capability']}, {env['memory_gib']} GiB)" if env.get("capability") else "")
         + f", {env.get('cpus', '?')} CPUs; Python {env.get('python', '?')}, torch {env.get('torch', '?')}"
         + f" (CUDA {env.get('torch_cuda')}). Wall {meta['wall_s']:.0f} s of a {meta['budget']} s budget.", ""]
    inst = meta.get("install") or {}
    L.append("Install: " + (f"{len(inst['wheels'])} wheels ({inst['mib']:.1f} MiB) into {inst['target']} in "
                            f"{inst['seconds']:.1f} s: {', '.join(inst['wheels'])}" if "wheels" in inst
                            else inst.get("note", "-")))
    L.append("")
    for name in ORDER:
        L += [f"## {TITLES[name]}", ""]
        sec = secs.get(name)
        if sec is None:
            L += [f"skipped: {meta['not_run'].get(name, 'not run')}", ""]
            continue
        try:
            L += RENDER[name](sec, secs)
            L += _skips(sec, EXPECTED.get(name, lambda s: None)(meta)) + [""]
        except Exception as exc:  # a row of an unexpected shape costs its section, never the report
            L += [f"skipped: rendering failed: {type(exc).__name__}: {exc} (the rows are in gpu_results.json)", ""]
    return "\n".join(L).rstrip() + "\n"


def _env(sec, secs):
    pk = section_rows(sec, "package")
    L = ["| package | version | from |", "|---|---|---|"] + [
        f"| {p['name']} | {p['version'] or '-'} | {p['where']} |" for p in pk] if pk else []
    req = section_rows(sec, "requirement")
    bad = [r for r in req if not r["ok"]]
    if req:
        L += ["", "Requirements of the carried wheels (installed with --no-deps): "
              + ("all met." if not bad else "NOT met: " + "; ".join(f"{r['of']} needs {r['requirement']}, "
                                                                    f"here {r['have']}" for r in bad))]
    return L


def _train(sec, secs):
    rows = section_rows(sec)
    if not rows:
        return []
    mem = "peak GiB (allocated / reserved)" if "peak_gib" in rows[0] else "peak RSS GiB (process)"
    L = [f"| mode | precision | arch | batch | ms/step | samples/s | {mem} | first step s | loss |",
         "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = f"{r['peak_gib']:.1f} / {r['reserved_gib']:.1f}" if "peak_gib" in r else _f(r.get("rss_gib"), 2)
        L.append(f"| {r['mode']} | {r['precision']} | {r['arch']} | {r['batch']} | {_f(r['step_ms'])} | "
                 f"{_f(r['samples_per_s'], 0)} | {m} | {_f(r['first_step_s'], 2)} | {r['loss']:.4f} |")
    by = {(r["precision"], r["mode"]): r for r in rows}
    ratios = [f"{p} {by[(p, 'macco')]['step_ms'] / by[(p, 'clip-ft')]['step_ms']:.2f}" for p in ("fp16", "bf16")
              if (p, "macco") in by and (p, "clip-ft") in by]
    if ratios:
        L += ["", f"MACCO / CLIP-FT step time: {', '.join(ratios)} (fp16: autocast + GradScaler, the CUDA default "
                  "`precision: auto`; bf16: autocast, no scaler)."]
    return L


def _compile(sec, secs):
    rows = section_rows(sec)
    if not rows:
        return []
    eager = {(r["precision"], r["mode"]): r for r in section_rows(secs.get("train", {"lines": []}))}
    L = ["| mode | precision | ms/step | eager ms/step | eager / compiled | first step (compiling) s | peak GiB |",
         "|---|---|---|---|---|---|---|"]
    for r in rows:
        e = eager.get((r["precision"], r["mode"]))
        L.append(f"| {r['mode']} | {r['precision']} | {_f(r['step_ms'])} | {_f(e and e['step_ms'])} | "
                 f"{_f(e and e['step_ms'] / r['step_ms'], 2)} | {_f(r['first_step_s'])} | "
                 f"{_f(r.get('peak_gib'))} |")
    return L


def _loader(sec, secs):
    rows = section_rows(sec)
    if not rows:
        return []
    L = ["| workers | samples/s | per worker |", "|---|---|---|"]
    for r in rows:
        L.append(f"| {r['workers']} | {_f(r['samples_per_s'])} | "
                 f"{_f(r['samples_per_s'] / r['workers']) if r['workers'] else '-'} |")
    per = max((r["samples_per_s"] / r["workers"] for r in rows if r["workers"]), default=None)
    steps = {(r["precision"], r["mode"]): r for r in section_rows(secs.get("train", {"lines": []}))}
    need = steps.get(("fp16", "macco"))
    L.append("")
    L.append("640x480 JPEG -> 224 crop + patch mask + collate (`bench/loader.py`), batch "
             f"{rows[0]['batch']}, {rows[0]['images']} images per setting.")
    if per and need:
        L.append(f"Workers needed to feed the MACCO fp16 step ({need['samples_per_s']:,.0f} samples/s): "
                 f"{need['samples_per_s']:,.0f} / {per:,.1f} per worker (best) = "
                 f"{math.ceil(need['samples_per_s'] / per)} (the reference uses 14).")
    return L


def _ground(sec, secs):
    rows = section_rows(sec)
    if not rows:
        return []
    L = ["| backend | model | params M | image | batch | batched img/s | per-image img/s | batched / per-image |",
         "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['backend']} (transformers {r['transformers']}) | {r['model']} | {_f(r.get('params_m'))} | "
                 f"{r['image']} | {r['batch']} | {_f(r['batched'], 2)} | {_f(r['per_image'], 2)} | "
                 f"{r['ratio']:.2f} |")
    L += ["", "Random weights (no checkpoint can be fetched); fp16 autocast on CUDA; the processor's resize and "
              "normalisation run on the CPU and are part of the rate."]
    return L


def _eval(sec, secs):
    rows = section_rows(sec)
    if not rows:
        return []
    L = ["| arch | precision | images/s (encode_image) | captions/s (Encoder.texts) | images, captions, batch |",
         "|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['arch']} | {'autocast' if r['autocast'] else 'fp32'} | {_f(r['images_per_s'], 0)} | "
                 f"{_f(r['captions_per_s'], 0)} | {r['images']}, {r['captions']}, {r['batch']} |")
    return L


def _e2e(sec, secs):
    L = []
    for r in section_rows(sec):
        a, b = r["first_losses"].get("total_loss"), r["losses"].get("total_loss")
        L += ["| arch | batch | steps | workers | precision | pairs/epoch | wall s | train s | samples/s (all steps) "
              "| samples/s (between logged steps) | total loss first -> last logged |",
              "|---|---|---|---|---|---|---|---|---|---|---|",
              f"| {r['arch']} | {r['batch']} | {r['steps']} | {r['workers']} | {r['precision']} | "
              f"{r['pairs_per_epoch']} | {_f(r['wall_s'])} | {_f(r['train_s'])} | {_f(r['samples_per_s'], 0)} | "
              f"{_f(r.get('steady_samples_per_s'), 0)} (steps {r.get('steady_steps', '-')}) | "
              f"{_f(a, 4)} -> {_f(b, 4)} |", "",
              "wall s: the whole `macco train` call (setup, the steps, checkpoint and export); train s: from the "
              "first step to the last logged one (the loader's worker start at each epoch included).",
              "Last logged terms: " + ", ".join(f"{k} {v:.4f}" for k, v in r["losses"].items())]
    for e in section_rows(sec, "export"):
        L.append(f"Export loaded back: {e['keys']} keys; same key set as the checkpoint's CLIP and the .pt: "
                 f"{'yes' if e['same_keys'] else 'NO'}; weights equal to the checkpoint's: "
                 f"{'yes' if e['same_weights'] else 'NO'}; encode_image local-dir vs .pt on {e['device']}: "
                 f"max |diff| {e['local_vs_pt_max_abs']:.2e}.")
    for n in section_rows(sec, "note"):
        L.append(f"World {n['world']} in {n['seconds']:.0f} s.")
    return L


RENDER = {"env": _env, "train": _train, "compile": _compile, "loader": _loader, "ground": _ground, "eval": _eval,
          "e2e": _e2e}
EXPECTED = {"train": lambda m: 4, "compile": lambda m: 4, "loader": lambda m: m["loader_settings"],
            "eval": lambda m: 2, "ground": lambda m: 2}
