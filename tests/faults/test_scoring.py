"""Faults in benchmark images (model/benchmarks/scoring.py): a 16-bit PNG is scored as its image (Pillow's
convert("RGB") clipped every value at 255: a white image), as training and grounding read it."""
from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from model.benchmarks.scoring import Encoder


def test_a_16_bit_benchmark_image_is_encoded_as_its_image_not_white(tmp_path):
    wide = (np.arange(32 * 32).reshape(32, 32) * 64).astype(np.uint16)  # 0 .. 65472
    Image.fromarray(wide).save(tmp_path / "g16.png")
    seen = []

    def preprocess(im):
        seen.append(np.asarray(im))
        return torch.zeros(3, 4, 4)

    class Model(torch.nn.Module):
        def encode_image(self, x):
            return torch.ones(len(x), 2)

    Encoder(Model(), preprocess, None).images([(str(tmp_path / "g16.png"), None), (str(tmp_path / "g16.png"),
                                                                                  (0, 0, 16, 8))])
    assert seen[0].shape == (32, 32, 3) and seen[1].shape == (8, 16, 3)
    np.testing.assert_array_equal(seen[0][..., 1], np.rint(wide / 257).astype(np.uint8))
