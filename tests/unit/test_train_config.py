"""model/train_config.py: the train section (a flow config given to ``macco train`` says how to run it, the shipped
example is valid) and the one source of defaults and names for the data and task configs."""
from __future__ import annotations

from pathlib import Path

from macco.cli import main
from tests_support import one_line_error


REPO = Path(__file__).resolve().parents[2]


def test_a_flow_config_given_to_macco_train_says_how_to_run_it(capsys):
    assert main(["train", "--config", str(REPO / "configs" / "demo.yaml")]) == 2
    err = one_line_error(capsys, "train")
    assert "is a flow config" in err and "macco run --config" in err and "train-example.yaml" in err


def test_the_train_example_config_is_a_valid_train_section():
    from model.train_config import load_config

    cfg = load_config(REPO / "configs" / "train-example.yaml")
    assert cfg.mode == "macco" and set(cfg.tables) == {"captions", "token_masks", "scene_graphs", "regions"}


def test_data_and_task_configs_take_their_defaults_from_the_train_config():
    """#32 item 2: DataConfig and MaccoConfig repeat no default of TrainConfig (one source) and are built from a
    run's TrainConfig."""
    from model.data import DataConfig
    from model.task import MaccoConfig
    from model.train_config import TrainConfig, load_config

    t = TrainConfig()
    d, m = DataConfig(), MaccoConfig()
    assert (d.split, d.crop_scale, d.rect_prob, d.rect_ratio, d.mask_phrases) == \
        (t.split, t.crop_scale, t.rect_prob, t.rect_ratio, t.mask_phrases)
    assert (m.mode, m.hardneg, m.mca, m.mir, m.predictor_heads) == (t.mode, t.hardneg, t.mca, t.mir,
                                                                      t.predictor_heads)
    run = load_config(None, ["rect_prob=0.3", "mode=image-only", "mca=false",
                             "loss_weights={image_reconstruction_loss: 7.5}"])
    assert DataConfig.from_train(run, "train").rect_prob == 0.3
    mc = MaccoConfig.from_train(run)
    assert (mc.mode, mc.mca, mc.loss_weights.image_reconstruction_loss, mc.loss_weights.contrast_loss) == \
        ("image-only", False, 7.5, 1.0)


def test_one_name_per_setting_from_the_yaml_to_the_loss():
    """The predictor's heads and the loss weights keep their YAML names down to the loss terms."""
    from model.losses import LossWeights, term_weights
    from model.task import MaccoConfig
    from model.train_config import load_config as train_config

    run = train_config(None, ["predictor_heads=4", "loss_weights={image_reconstruction_loss: 7.5}"])
    mc = MaccoConfig.from_train(run)
    assert mc.predictor_heads == 4 and mc.loss_weights.image_reconstruction_loss == 7.5
    assert set(term_weights(LossWeights())) == {f.name for f in __import__("dataclasses").fields(LossWeights)}


def test_accumulation_and_clipping_settings_are_checked():
    """accum_steps must split batch_size into equal micro-batches; grad_clip_norm is a positive norm or none."""
    import pytest

    from data_schemas.config import ConfigError
    from model.train_config import load_config

    ok = load_config(None, ["batch_size=12", "accum_steps=4", "grad_clip_norm=1"])
    assert (ok.accum_steps, ok.grad_clip_norm) == (4, 1.0) and load_config(None, []).grad_clip_norm is None
    with pytest.raises(ConfigError, match=r"train config accum_steps: 5 does not divide batch_size 12"):
        load_config(None, ["batch_size=12", "accum_steps=5"])
    for bad in ("0", "-1.5", ".inf"):
        with pytest.raises(ValueError, match=r"train config grad_clip_norm: .* must be (> 0|finite)"):
            load_config(None, [f"grad_clip_norm={bad}"])
