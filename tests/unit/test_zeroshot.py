"""model/benchmarks/zeroshot.py: zero-shot classification on an image folder."""
import pytest
from PIL import Image


def test_zeroshot_on_an_image_folder(tmp_path):
    import open_clip
    import torch

    from model.factory import register_model_configs
    from model.benchmarks import zeroshot
    from model.benchmarks.scoring import Encoder

    for cls, colour in (("red_thing", (220, 20, 20)), ("blue_thing", (20, 20, 220))):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.new("RGB", (32, 32), colour).save(tmp_path / cls / f"{i}.png")
    (tmp_path / "classnames.txt").write_text("blue thing\nred thing\n")
    register_model_configs()
    torch.manual_seed(0)
    model, _, pre = open_clip.create_model_and_transforms("macco-micro")
    r = zeroshot.evaluate(Encoder(model, pre, open_clip.get_tokenizer("macco-micro")), tmp_path)
    assert r["n"] == 6 and r["classes"] == 2 and r["templates"] == 80
    assert r["top1"] in {0.0, 0.5, 1.0} and r["top2"] == 1.0
    (tmp_path / "classnames.txt").write_text("only one\n")
    with pytest.raises(ValueError, match="1 names for 2 class folders"):
        zeroshot.evaluate(Encoder(model, pre, open_clip.get_tokenizer("macco-micro")), tmp_path)
