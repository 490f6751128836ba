import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from pipeline.patches import (GEOMETRIES, Geometry, box_patches, eval_crop, eval_patches, geometry_for,
                              random_rectangle)


def test_reference_worked_example_b32():
    """A worked example of the official patch-mask rule (hiker-lw/MACCO src/training/data_macco.py): 640x480,
    crop (10, 20, 460, 610), box [100,50,300,200] -> 12 patches."""
    got = box_patches([100, 50, 300, 200], (10, 20, 460, 610), GEOMETRIES["ViT-B-32"])
    assert [i + 1 for i in got] == [1, 2, 3, 4, 8, 9, 10, 11, 15, 16, 17, 18]  # reference indices have CLS at 0


def test_edge_on_patch_boundary_does_not_spill():
    geo = Geometry(224, 32)
    assert box_patches([0, 0, 64, 32], (0, 0, 224, 224), geo) == [0, 1]


@pytest.mark.parametrize("name,grid", [("ViT-B-32", 7), ("ViT-B-16", 14), ("ViT-L-14", 16), ("macco-tiny", 8),
                                       ("macco-micro", 4)])
def test_grids(name, grid):
    geo = geometry_for(name)
    assert geo.grid == grid
    full = box_patches([0, 0, geo.image_size, geo.image_size], (0, 0, geo.image_size, geo.image_size), geo)
    assert full == list(range(grid * grid))
    # a box covering exactly the last patch
    p = geo.patch_size
    last = box_patches([geo.image_size - p, geo.image_size - p, geo.image_size, geo.image_size],
                       (0, 0, geo.image_size, geo.image_size), geo)
    assert last == [grid * grid - 1]


def test_hand_computed_b16_and_l14():
    # ViT-B/16: box [20, 40, 50, 41] -> cols 1..3, row 2
    assert box_patches([20, 40, 50, 41], (0, 0, 224, 224), GEOMETRIES["ViT-B-16"]) == [29, 30, 31]
    # ViT-L/14: box [13.9, 0, 14.1, 14] -> cols 0..1 of row 0
    assert box_patches([13.9, 0, 14.1, 14], (0, 0, 224, 224), GEOMETRIES["ViT-L-14"]) == [0, 1]


def test_box_outside_crop_marks_nothing():
    geo = GEOMETRIES["ViT-B-32"]
    crop = (100, 100, 400, 400)  # top, left, h, w
    assert box_patches([0, 0, 10, 5], crop, geo) == []  # left of / above the crop (reference bug: index 1)
    assert box_patches([600, 600, 640, 640], crop, geo) == []  # right of / below
    assert box_patches([90, 90, 101, 101], crop, geo) == [0]  # overlaps by one pixel


def test_eval_crop_matches_torchvision_transform():
    """The box mapping equals what Resize + CenterCrop does to a one-box image."""
    from torchvision import transforms as T
    import numpy as np

    size = 224
    for w, h, box in [(640, 480, [100, 50, 300, 200]), (480, 640, [10, 300, 200, 630]), (500, 500, [0, 0, 250, 250])]:
        img = Image.new("L", (w, h), 0)
        img.paste(255, (box[0], box[1], box[2], box[3]))
        out = np.array(T.Compose([T.Resize(size, interpolation=T.InterpolationMode.NEAREST), T.CenterCrop(size)])(img))
        geo = Geometry(size, 32)
        got = set(eval_patches([box], w, h, geo))
        want = {r * 7 + c for r in range(7) for c in range(7) if out[r * 32:(r + 1) * 32, c * 32:(c + 1) * 32].any()}
        assert got == want, (w, h)
        top, left, ch, cw = eval_crop(w, h, size)
        assert ch == pytest.approx(min(w, h), rel=0.01) and cw == pytest.approx(min(w, h), rel=0.01)


@settings(max_examples=300, deadline=None)
@given(st.integers(8, 400), st.integers(8, 400), st.data(),
       st.sampled_from([Geometry(224, 32), Geometry(224, 16), Geometry(224, 14), Geometry(64, 8)]))
def test_property_mask_is_the_set_of_intersected_patches(W, H, data, geo):
    x1 = data.draw(st.floats(-50, W + 50)); x2 = data.draw(st.floats(-50, W + 50))
    y1 = data.draw(st.floats(-50, H + 50)); y2 = data.draw(st.floats(-50, H + 50))
    box = [min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)]
    top = data.draw(st.floats(0, H - 4)); left = data.draw(st.floats(0, W - 4))
    ch = data.draw(st.floats(4, H - top)); cw = data.draw(st.floats(4, W - left))
    crop = (top, left, ch, cw)
    got = set(box_patches(box, crop, geo))
    S, P = geo.image_size, geo.patch_size
    want = set()
    for r in range(geo.grid):
        for c in range(geo.grid):
            # the patch in original coordinates
            px1, px2 = left + c * P * cw / S, left + (c + 1) * P * cw / S
            py1, py2 = top + r * P * ch / S, top + (r + 1) * P * ch / S
            ix = min(box[2], px2, left + cw) - max(box[0], px1, left)
            iy = min(box[3], py2, top + ch) - max(box[1], py1, top)
            if ix > 1e-9 and iy > 1e-9:
                want.add(r * geo.grid + c)
    # points within floating tolerance of a patch edge may go either way
    assert got ^ want == set() or all(_near_edge(box, crop, geo, k) for k in got ^ want)


def _near_edge(box, crop, geo, k, eps=1e-6):
    top, left, ch, cw = crop
    S, P = geo.image_size, geo.patch_size
    r, c = divmod(k, geo.grid)
    xs = [(box[0] - left) * S / cw, (box[2] - left) * S / cw]
    ys = [(box[1] - top) * S / ch, (box[3] - top) * S / ch]
    edges = [c * P, (c + 1) * P, r * P, (r + 1) * P]
    return any(abs(v - e) < eps * S for v in xs + ys for e in edges) or \
        any(abs(v) < eps * S or abs(v - S) < eps * S for v in xs + ys)


@pytest.mark.parametrize("grid", [7, 14, 16, 8])
def test_random_rectangle_on_the_right_grid(grid):
    rng = random.Random(0)
    n = grid * grid
    target = round(n * 0.75)
    for _ in range(200):
        idx = random_rectangle(grid, 0.75, rng)
        assert idx and max(idx) < n and len(set(idx)) == len(idx)
        assert abs(len(idx) - target) <= max(1, 0.25 * target)
        rows = {i // grid for i in idx}
        cols = {i % grid for i in idx}
        assert len(idx) == len(rows) * len(cols)  # a rectangle
    assert random_rectangle(grid, 0.0, rng) == [] and random_rectangle(grid, 1.0, rng) == list(range(n))


def test_b32_rectangle_sizes_match_reference():
    rng = random.Random(1)
    sizes = set()
    for _ in range(2000):
        idx = random_rectangle(7, 0.75, rng)
        sizes.add((len({i // 7 for i in idx}), len({i % 7 for i in idx})))
    assert sizes == {(4, 7), (7, 4), (5, 6), (6, 5), (5, 7), (7, 5), (6, 6), (6, 7), (7, 6)}
