"""``macco train --help``'s config keys show each default's value (as key=value or YAML writes it), never the
source expression (``DEFAULT_ARCH``, ``unkeyed(None)``, ``asdict(LossWeights())``), and need no torch."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from macco.config_help import dataclass_defaults, shown, train_keys_help

REPO = Path(__file__).resolve().parents[2]


def key_lines() -> dict[str, tuple[str, bool]]:
    lines = [ln for ln in train_keys_help().splitlines()[1:] if " = " in ln]
    out = {}
    for ln in lines:
        key, _, value = ln.strip().partition(" = ")
        out[key] = (value.removesuffix(" *"), value.endswith(" *"))
    return out


def test_every_key_shows_the_dataclass_default_value():
    from data_schemas.config import keyed_fields
    from model.train_config import TrainConfig

    shown_keys, real = key_lines(), TrainConfig()
    assert list(shown_keys) == [f.name for f in dataclasses.fields(TrainConfig)]
    for f in dataclasses.fields(TrainConfig):
        value, unkeyed = shown_keys[f.name]
        assert json.loads(value) == json.loads(shown(getattr(real, f.name))), f.name
        assert unkeyed == (f.name not in keyed_fields(TrainConfig)), f.name
    assert shown_keys["arch"][0] == '"ViT-B-32"' and shown_keys["pretrained"] == ("null", True)
    assert json.loads(shown_keys["loss_weights"][0])["image_reconstruction_loss"] == 250.0


def test_no_source_expression_is_shown():
    text = train_keys_help()
    for source in ("DEFAULT_ARCH", "unkeyed(", "asdict(", "LossWeights", "field(", "lambda"):
        assert source not in text, source


def test_help_needs_no_torch():
    code = "import sys; from macco.config_help import train_keys_help; train_keys_help(); print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and run.stdout.strip() == "False", run.stderr[-2000:]


def test_dataclass_defaults_follow_a_helper_returning_a_field():
    """``LossWeights``' fields are ``_term(weight, label)``: the weight is the default."""
    from model.losses import LossWeights

    assert dataclass_defaults("model.losses", "LossWeights") == dataclasses.asdict(LossWeights())
