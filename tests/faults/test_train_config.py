"""Faults in the train config (model/train_config.py): values out of range are one line."""
from __future__ import annotations

import pytest

from macco.cli import main
from tests_support import one_line_error


@pytest.mark.parametrize("override,message", [
    ("batch_size=0", "batch_size: 0 must be > 0"),  # was a ZeroDivisionError
    ("max_steps=-5", "max_steps: -5 must be > 0"),  # was a misleading "no full batch"
    ("lr_clip=-1", "lr_clip: -1.0 must be >= 0"),  # trained and reported Completed
    ("rect_prob=1.5", "rect_prob: 1.5 must be in [0, 1]"),
    ("loss_weights={image_reconstruction_loss: -250}", "loss_weights.image_reconstruction_loss: -250 must be >= 0"),
    ("lr_clip=.inf", "lr_clip: inf must be finite"),  # passed; training died at step 0 with NonFiniteLoss
    ("loss_weights={contrast_loss: .inf}", "loss_weights.contrast_loss: inf must be finite"),
    ("rect_ratio=.nan", "rect_ratio: nan must be finite"),
    ("seed=-3", "seed: -3 must be >= 0"),  # accepted: torch seeds with it, the flow's run names carry it
])
def test_train_config_out_of_range_is_one_line(tmp_path, capsys, override, message):
    assert main(["train", override, f"out_dir={tmp_path / 'r'}"]) == 2
    assert message in one_line_error(capsys, "train")


def test_a_negative_common_seed_in_a_flow_config_is_refused_when_it_is_read(tmp_path):
    """`train: {common: {seed: -3}}` was accepted and the flow ran (the runs' own seeds were already refused)."""
    from data_schemas.config import ConfigError
    from flows.config import load_config

    (tmp_path / "c.yaml").write_text("train:\n  common: {seed: -3}\n")
    with pytest.raises(ConfigError, match=r"train.common seed: -3 must be >= 0"):
        load_config(tmp_path / "c.yaml")
