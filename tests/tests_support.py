from contextlib import contextmanager
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared"


def without_logging_errors(err: str) -> str:
    """stderr without Python's "--- Logging error ---" reports: a Prefect console handler left on the root logger by
    an in-process flow run of an earlier test writes to that test's closed capture stream (a test-run artifact,
    not output of the command under test)."""
    import re

    return re.sub(r"--- Logging error ---\n.*?\nArguments: [^\n]*\n", "", err, flags=re.S)


def needs_shared(*paths: str):
    """Skip unless every path exists under ``SHARED`` (the reference files beside the repo, absent in a bare
    clone); where they exist the test runs."""
    missing = [p for p in paths if not (SHARED / p).exists()]
    return pytest.mark.skipif(bool(missing), reason=f"needs {SHARED / (missing or [''])[0]} (not in a bare clone)")

WORDS = ("a an the of on in to and red green blue yellow purple orange white black small large big little "
         "circle square triangle diamond cross hexagon man horse dog cat brown").split()


def write_tiny_bert(path: Path, with_model: bool = True, hidden: int = 32) -> Path:
    """A tiny uncased BERT tokenizer (+ random BertModel) keeping bert-base-uncased's special ids."""
    from transformers import BertConfig, BertModel, BertTokenizer

    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    extra = list(WORDS) + [chr(c) for c in range(97, 123)] + [f"##{chr(c)}" for c in range(97, 123)]
    vocab += list(dict.fromkeys(extra))
    while len(vocab) < 1012:
        vocab.append(f"[unused{len(vocab)}]")
    vocab.append(".")
    while len(vocab) < 1029:
        vocab.append(f"[unused{len(vocab)}]")
    vocab += ["?", ","]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizer(str(path / "vocab.txt"), do_lower_case=True)
    assert tok.convert_tokens_to_ids(["[CLS]", "[SEP]", ".", "?"]) == [101, 102, 1012, 1029]
    tok.save_pretrained(path)
    if with_model:
        cfg = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=512)
        BertModel(cfg).save_pretrained(path)
    return path


def build_tiny_hf_groundingdino(path: Path) -> Path:
    """A tiny random transformers GroundingDINO saved with its processor (a Swin-tiny backbone and a 1-layer BERT)."""
    import torch
    from transformers import (BertConfig, BertTokenizer, GroundingDinoConfig, GroundingDinoForObjectDetection,
                              GroundingDinoImageProcessor, GroundingDinoProcessor, SwinConfig)

    torch.manual_seed(0)
    bert = write_tiny_bert(path / "bert", with_model=False)
    tok = BertTokenizer(str(bert / "vocab.txt"), do_lower_case=True)
    cfg = GroundingDinoConfig(
        backbone_config=SwinConfig(image_size=224, patch_size=4, embed_dim=32, depths=[1, 1, 1, 1],
                                   num_heads=[1, 2, 4, 8], window_size=7, out_indices=[2, 3, 4]),
        text_config=BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=256),
        d_model=64, num_queries=20, encoder_layers=1, decoder_layers=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
        encoder_attention_heads=2, decoder_attention_heads=2, num_feature_levels=4, max_text_len=64)
    model = GroundingDinoForObjectDetection(cfg).eval()
    proc = GroundingDinoProcessor(image_processor=GroundingDinoImageProcessor(
        size={"shortest_edge": 224, "longest_edge": 224}), tokenizer=tok)
    out = path / "hf"
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return out


TINY_GDINO_CFG = """
batch_size = 1
modelname = "groundingdino"
backbone = "swin_T_224_1k"
position_embedding = "sine"
pe_temperatureH = 20
pe_temperatureW = 20
return_interm_indices = [1, 2, 3]
backbone_freeze_keywords = None
enc_layers = 1
dec_layers = 1
pre_norm = False
dim_feedforward = 128
hidden_dim = 256
dropout = 0.0
nheads = 8
num_queries = 20
query_dim = 4
num_patterns = 0
num_feature_levels = 4
enc_n_points = 4
dec_n_points = 4
two_stage_type = "standard"
two_stage_bbox_embed_share = False
two_stage_class_embed_share = False
transformer_activation = "relu"
dec_pred_bbox_embed_share = True
dn_box_noise_scale = 1.0
dn_label_noise_ratio = 0.5
dn_label_coef = 1.0
dn_bbox_coef = 1.0
embed_init_tgt = True
dn_labelbook_size = 2000
max_text_len = 256
text_encoder_type = "bert-base-uncased"
use_text_enhancer = True
use_fusion_layer = True
use_checkpoint = False
use_transformer_ckpt = False
use_text_cross_attention = True
text_dropout = 0.0
fusion_dropout = 0.0
fusion_droppath = 0.1
sub_sentence_present = True
"""


def build_tiny_groundingdino_py(path: Path) -> dict:
    """A tiny random groundingdino-py model: config .py, checkpoint .pth ({"model": state_dict}), BERT dir."""
    import torch
    from groundingdino.models import build_model
    from groundingdino.util.slconfig import SLConfig

    torch.manual_seed(0)
    path.mkdir(parents=True, exist_ok=True)
    bert = write_tiny_bert(path / "bert")
    cfg_file = path / "tiny_gdino.py"
    cfg_file.write_text(TINY_GDINO_CFG)
    args = SLConfig.fromfile(str(cfg_file))
    args.device = "cpu"
    args.text_encoder_type = str(bert)
    model = build_model(args)
    ckpt = path / "tiny_gdino.pth"
    torch.save({"model": model.state_dict()}, ckpt)
    return {"checkpoint": str(ckpt), "config_file": str(cfg_file), "bert_dir": str(bert)}


def write_shard(path: Path, samples: list[dict]) -> Path:
    """A webdataset tar shard: per sample {key}.<ext> members (bytes or str)."""
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for s in samples:
            for ext, value in s.items():
                if ext == "__key__":
                    continue
                data = value.encode() if isinstance(value, str) else value
                info = tarfile.TarInfo(f"{s['__key__']}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path

@contextmanager
def read_only_folder(path: Path):
    """``path`` (created) mounted read-only (a bind mount: root may write anywhere else); skips the test where this
    machine cannot mount."""
    import subprocess

    import pytest

    src = path.with_name(path.name + "-src")
    src.mkdir(parents=True, exist_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    ok = subprocess.run(["mount", "--bind", str(src), str(path)], capture_output=True).returncode == 0 and \
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True).returncode == 0
    if not ok:
        subprocess.run(["umount", str(path)], capture_output=True)
        pytest.skip("this machine cannot bind-mount a read-only folder")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def bomb_png(width: int = 30000, height: int = 30000) -> bytes:
    """A tiny PNG (about 70 bytes) whose header claims ``width`` x ``height`` pixels (a decompression bomb)."""
    import io
    import struct
    import zlib

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    ihdr = data.index(b"IHDR")
    data[ihdr + 4:ihdr + 12] = struct.pack(">II", width, height)
    body = bytes(data[ihdr:ihdr + 17])  # chunk type + 13 bytes of IHDR data
    data[ihdr + 17:ihdr + 21] = struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    return bytes(data)


# ---- the flow under a Prefect test harness (tests/e2e) -------------------------------------------------
def prefect_env(tmp_path: Path) -> dict:
    """The environment of a ``macco run`` subprocess with its own Prefect home and ephemeral server."""
    import os

    # no PREFECT_API_URL (an empty one breaks Prefect's events worker: "Service 'EventsWorker' failed"): the run
    # starts its own temporary server
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return {**env, "PREFECT_HOME": str(tmp_path / "prefect-home"),
            "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(tmp_path / "results"), "OMP_NUM_THREADS": "1"}


def task_states(flow_run_id) -> dict[str, list[str]]:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as c:
        runs = c.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])), limit=200)
    out: dict[str, list[str]] = {}
    for r in runs:
        groups = ("parse-shard", "ground-shard", "train", "evaluate", "report")
        group = next((g for g in groups if r.name.startswith(g)), r.name)
        out.setdefault(group, []).append(r.state.name)
    return out


def run_flow_states(config: Path, **kw):
    """Run the flow (it must complete); returns its result and the task states by stage."""
    from flows.pipeline import macco_pipeline

    state = macco_pipeline(config=str(config), return_state=True, **kw)
    assert state.is_completed(), state
    return state.result(), task_states(state.state_details.flow_run_id)




def build_world_tables(world: Path, out: Path, clip_model: str | None = None) -> list[dict]:
    """A world's training tables under ``out``: captions -> parse (spaCy rules; token masks in ``clip_model``'s
    tokenizer, default the CLIP BPE) -> ground (the world's annotations, into ``out/ground``), as the flow builds
    them; returns the caption rows."""
    from data_schemas import TABLES, read_table
    from pipeline.grounding.base import GroundingConfig
    from pipeline.captions_stage import CaptionsConfig, captions_stage, read_caption_input
    from pipeline.grounding.stage import ground_stage, read_instances
    from pipeline.parse_stage import ParseConfig, parse_stage

    captions_stage(CaptionsConfig(root=str(world)), out)
    caps = read_caption_input(out / "captions")
    parse_stage(ParseConfig(**({"clip_model": clip_model} if clip_model else {})), caps, out)
    sg = read_table(TABLES["scene_graphs"], out / "scene_graphs").to_pylist()
    ground_stage(GroundingConfig(), caps, sg, world, out / "ground",
                 instances=read_instances(world, ["train", "val", "test"]))
    return caps


# ---- shared by the test files of several modules ---------------------------------------------------------------
REPO = Path(__file__).resolve().parents[1]
CAPTION = "a red circle left of a blue square"


def one_line_error(capsys, verb: str) -> str:
    """stderr of a ``macco <verb>`` that failed with one line (and no traceback); Prefect's logging-error reports
    left out (``without_logging_errors``)."""
    err = without_logging_errors(capsys.readouterr().err)
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(f"macco {verb}: "), err
    return err


def strict_one_line_error(capsys, verb: str) -> str:
    """``one_line_error`` on stderr as it is (nothing left out)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(f"macco {verb}: "), err
    return err


def png(path: Path, size=(40, 30)) -> Path:
    from PIL import Image

    Image.new("RGB", size, (200, 10, 10)).save(path)
    return path


def coco_json(path, annotations, images=({"id": 1, "file_name": "one.png", "width": 40, "height": 30},)):
    import json

    path.write_text(json.dumps({"images": list(images), "annotations": annotations}))
    return path


def read_errors(out: Path) -> list[dict]:
    from data_schemas import TABLES, read_table

    return read_table(TABLES["errors"], out / "errors").to_pylist()


def read_captions(out: Path) -> list[dict]:
    from data_schemas import TABLES, read_table

    return read_table(TABLES["captions"], out / "captions").to_pylist()


def error_rows(n: int, message: str = "m") -> list[dict]:
    return [dict(stage="s", item_id=str(i), reason="r", message=message) for i in range(n)]


def tiny_flow_config(tmp_path: Path, **over) -> Path:
    """configs/tiny.yaml with its artifacts under ``tmp_path`` and ``over``'s sections, written to tmp_path/c.yaml."""
    import yaml

    cfg = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    cfg["artifacts"] = str(tmp_path / "artifacts")
    cfg.update(over)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "c.yaml"


@pytest.fixture()
def world_tables_copy(world, world_tables, tmp_path):
    """The session world's tables copied where a test may add to them (captions, parse, ground, masks)."""
    import shutil

    t = tmp_path / "T"
    for name in ("captions", "scene_graphs", "token_masks"):
        shutil.copytree(world_tables[name], t / name)
    shutil.copytree(world_tables["root"] / "ground", t / "ground")
    return t


@pytest.fixture()
def captions_and_errors_tables(tmp_path):
    """A captions table and an errors table under tmp_path/T (as `macco captions --out T` writes them)."""
    from macco.cli import main
    from pipeline.world import WorldConfig, generate_world

    generate_world(tmp_path / "w", WorldConfig(seed=1, images=6, size=32, eval_fraction=0.5, benchmarks=False))
    assert main(["captions", str(tmp_path / "w"), "--out", str(tmp_path / "T")]) == 0
    return tmp_path / "T"


@pytest.fixture()
def artifacts_cwd(world_tables, tmp_path, monkeypatch):
    """A copy of the session tables as ``artifacts/`` in a fresh working directory (the README's paths)."""
    import shutil

    shutil.copytree(world_tables["root"], tmp_path / "artifacts")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "artifacts"


def micro_train_config(world, world_tables, out: Path, **kw):
    """A macco-micro training config on the session tables (4 steps at batch 8), ``kw`` on top."""
    from model.train import load_config

    base = dict(arch="macco-micro", batch_size=8, max_steps=4, workers=0, lr_clip=1e-3, lr_predictor=1e-3, warmup=1,
                log_every=1, progress=False, out_dir=str(out), image_root=str(world),
                tables={k: str(v) for k, v in world_tables.items() if k != "root"})
    return load_config(None, [], **{**base, **kw})


# ---- model tests: a macco-micro CLIP and a batch ----------------------------------------------------------------
@pytest.fixture(scope="module")
def micro_clip():
    import open_clip
    import torch

    from model.factory import register_model_configs

    register_model_configs()
    torch.manual_seed(0)
    return open_clip.create_model("macco-micro")


@pytest.fixture(scope="module")
def micro_batch():
    import open_clip
    import torch

    tok = open_clip.get_tokenizer("macco-micro")
    t = tok(["a red circle left of a blue square", "a dog on a couch", "two cats"])
    torch.manual_seed(1)
    img = torch.randn(3, 3, 32, 32)
    tm = torch.zeros(3, 77, dtype=torch.bool)
    tm[0, 2] = tm[0, 4] = tm[1, 3] = True
    im = torch.zeros(3, 16, dtype=torch.bool)
    im[0, :4] = im[1, 5:9] = True
    return img, t, tm, im


# ---- tables: a clean row per table (each DuckDB check passes) ---------------------------------------------------
def clean_rows():
    from datetime import datetime, timezone

    cap = "a red circle left of a blue square"
    return {
        "captions": [{"caption_id": 1, "image_id": 10, "file_name": "a.jpg", "width": 64, "height": 48,
                      "caption": cap, "split": "train"},
                     {"caption_id": 2, "image_id": 11, "file_name": "b.jpg", "width": 64, "height": 48,
                      "caption": "a blue square", "split": "train"}],
        "scene_graphs": [
            dict(caption_id=1, concept_id=0, kind="object", text="circle", char_start=6, char_end=12,
                 subject_id=None, object_id=None, phrase="circle", parser="rules"),
            dict(caption_id=1, concept_id=1, kind="object", text="square", char_start=28, char_end=34,
                 subject_id=None, object_id=None, phrase="square", parser="rules"),
            dict(caption_id=1, concept_id=2, kind="attribute", text="red", char_start=2, char_end=5,
                 subject_id=None, object_id=0, phrase="red circle", parser="rules"),
            dict(caption_id=1, concept_id=3, kind="relation", text="left of", char_start=13, char_end=20,
                 subject_id=0, object_id=1, phrase="circle left of square", parser="rules"),
        ],
        "token_masks": [
            dict(caption_id=1, tokenizer="clip-bpe", token_ids=[49406, 320, 736, 2866, 1823, 539, 320, 1746,
                                                              5468, 49407] + [0] * 67,
                 eot_idx=9, relation_idx=[4, 5], attribute_idx=[2], object_idx=[3, 8], unmatched=[],
                 truncated=False),
            dict(caption_id=2, tokenizer="clip-bpe", token_ids=[49406, 320, 1746, 5468, 49407] + [0] * 72,
                 eot_idx=4, relation_idx=[], attribute_idx=[2], object_idx=[3], unmatched=[], truncated=False),
        ],
        "regions": [
            dict(caption_id=1, concept_id=2, box_id=0, image_id=10, phrase="red circle",
                 box_xyxy=[1.0, 2.0, 20.0, 30.0], score=1.0, label="circle", backend="annotations"),
            dict(caption_id=1, concept_id=3, box_id=0, image_id=10, phrase="circle left of square",
                 box_xyxy=[1.0, 2.0, 20.0, 30.0], score=0.9, label="circle", backend="annotations"),
            dict(caption_id=1, concept_id=3, box_id=1, image_id=10, phrase="circle left of square",
                 box_xyxy=[30.0, 2.0, 64.0, 48.0], score=0.9, label="square", backend="annotations"),
        ],
        "patch_masks": [
            dict(caption_id=1, concept_id=2, grid=8, image_id=10, patch_idx=[0, 1, 8, 9], image_size=64,
                 patch_size=8, preprocess="resize-center-crop"),
            dict(caption_id=1, concept_id=3, grid=8, image_id=10, patch_idx=[0, 1, 63], image_size=64,
                 patch_size=8, preprocess="resize-center-crop"),
        ],
        "errors": [dict(stage="captions", item_id="9", reason="empty_caption", message="empty")],
        "eval_results": [dict(eval_id="e1", run="macco-s0", benchmark="sugarcrepe", level="subset", subset="swap_att",
                              model_id="m", n=10, correct=7, metric="accuracy", accuracy=0.7, ties=0, missing_images=0,
                              checkpoint_sha256="abc", config="{}", config_key="k", protocol="authors",
                              activation="gelu", code_version="c", trigger="macco eval",
                              created=datetime(2026, 1, 1, tzinfo=timezone.utc))],
        "official": [dict(caption_id=1, objects=["circle", "square"], relations=["left of"], attributes=["red", "blue"],
                          relation_phrases=["circle left of square"], attribute_phrases=["red circle", "blue square"],
                          phrase_boxes='{"red circle": [[1, 2, 20, 40]]}', neg_captions=[])],
        "image_neighbours": [dict(image_id=10, caption_id=None, rank=0, neighbour_image_id=11, neighbour_caption_id=None,
                                  similarity=0.5),
                             dict(image_id=11, caption_id=2, rank=0, neighbour_image_id=10, neighbour_caption_id=1,
                                  similarity=None)],
        "negative_captions": [dict(caption_id=1, negatives=["a blue circle left of a red square"]),
                              dict(caption_id=2, negatives=[])],
    }


def write_all(root, rows):
    from data_schemas import TABLES, write_table

    out = {}
    for name, r in rows.items():
        spec = TABLES[name]
        out[name] = root / name
        write_table(spec, out[name], spec.from_rows(r), config={"t": name}, code_version="test")
    return out


# ---- evaluation: fake encoders, benchmark files in their original formats, results ------------------------------
class FakeEncoder:
    """Deterministic features: images by path, texts by string, from dicts (unknown -> a fixed vector)."""

    def __init__(self, img=None, txt=None, dim=4):
        self.img, self.txt, self.dim = img or {}, txt or {}, dim

    def _v(self, table, key):
        import numpy as np

        v = np.asarray(table.get(key, np.ones(self.dim)), dtype=np.float64)
        return v / np.linalg.norm(v)

    def images(self, keys):
        import numpy as np

        return np.stack([self._v(self.img, k[0]) for k in keys]) if keys else np.zeros((0, self.dim))

    def texts(self, texts):
        import numpy as np

        return np.stack([self._v(self.txt, t) for t in texts]) if texts else np.zeros((0, self.dim))


GOOD_FEATURE, BAD_FEATURE = [1.0, 0, 0, 0], [-1.0, 0, 0, 0]  # against ProtocolEncoder's default image: right / wrong


class ProtocolEncoder:
    """Images: a fixed vector (or by path); texts by string (unknown -> zeros + a tiny distinct component)."""

    activation = "fake"

    def __init__(self, txt=None, img=None):
        self.txt, self.img = txt or {}, img or {}

    def images(self, keys):
        import numpy as np

        return np.stack([np.asarray(self.img.get(k[0], [0.5, 0.5, 0.5, 0.5])) for k in keys]) if keys \
            else np.zeros((0, 4))

    def texts(self, texts):
        import numpy as np

        return np.stack([np.asarray(self.txt.get(t, [0, 0, 0, 0.1]), dtype=float) for t in texts]) if texts \
            else np.zeros((0, 4))


class DictEncoder:
    """Features from dicts: images by path, texts by string (an unknown key is an error, not a default)."""

    def __init__(self, img=None, txt=None):
        self.img, self.txt = img or {}, txt or {}

    @staticmethod
    def _unit(v):
        import numpy as np

        v = np.asarray(v, dtype=np.float64)
        return v / np.linalg.norm(v)

    def images(self, keys):
        import numpy as np

        return np.stack([self._unit(self.img[str(p)]) for p, _ in keys])

    def texts(self, texts):
        import numpy as np

        return np.stack([self._unit(self.txt[t]) for t in texts])


def blank_image(path):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8)).save(path)


def coloured_png(path: Path, colour=(200, 30, 30)) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), colour).save(path)
    return path


def dump_json(path, obj):
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def micro_checkpoint(tmp_path):
    import open_clip
    import torch

    from model.factory import register_model_configs

    register_model_configs()
    torch.manual_seed(0)
    p = tmp_path / "m.pt"
    torch.save({"state_dict": open_clip.create_model("macco-micro").state_dict()}, p)
    return p


def micro_eval_cli(*args: str) -> int:
    from macco.cli import main

    return main(["eval", "--model", "macco-micro", *([] if "--checkpoint" in args else ["--random-init"]), *args])


def vlc_original(root, files, n=6, missing=()):
    """Original release layout: data/<file>.json records [path, {POS, NEG}] and images under images/<source>/."""
    for rel in files:
        recs = [[f"VG_100K/{rel.replace('/', '_')}_{i}.jpg", {"POS": [f"pos {i}"], "NEG": [f"neg {i}"]}]
                for i in range(n)]
        dump_json(root / "data" / f"{rel}.json", recs)
        src = rel.split("/")[1]
        for i in range(n):
            if i not in missing:
                blank_image(root / "images" / src / "VG_100K" / f"{rel.replace('/', '_')}_{i}.jpg")


def eval_json(label: str | None, whatsup: str, vgr: str = "1100") -> dict:
    """An evaluation result as ``macco eval --out`` / the evaluate stage write it: What's Up and VG-R groups
    with their per-case strings ('1' right, '0' wrong)."""
    res = {"model": "macco-micro", "benchmarks": {
        "whatsup": {"subsets": {"controlled_a": {"n": len(whatsup)}},
                    "groups": {"whatsup_macro": whatsup.count("1") / len(whatsup)},
                    "cases": {"whatsup_macro": whatsup}},
        "aro-vgr": {"subsets": {"on": {"n": len(vgr)}}, "groups": {"macro": vgr.count("1") / len(vgr)},
                    "cases": {"macro": vgr}}}}
    if label is not None:
        res["label"] = label
    return res


def evaluation(run: str, subsets: int = 2) -> dict:
    """One evaluation's result as ``model.benchmarks.evaluate`` returns it."""
    import uuid

    return {"model": "macco-micro", "run": run, "checkpoint_sha256": f"sha-{run}", "eval_id": uuid.uuid4().hex,
            "code_version": "c", "created": "2026-12-03T00:00:00.000000Z", "activation": "gelu",
            "benchmarks": {"sugarcrepe": {"subsets": {f"s{i}": {"n": 10, "correct": i, "accuracy": i / 10}
                                                      for i in range(subsets)}}}}


def run_at_once(target, arg_sets: list[tuple], timeout: float = 120) -> None:
    """``target(*args, barrier)`` in one spawned process per ``args``, released together by the barrier (the
    concurrent-writer tests); each must exit 0."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(len(arg_sets))
    procs = [ctx.Process(target=target, args=(*args, start)) for args in arg_sets]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0


def kill_group_when(proc, found, deadline: float, poll: float = 0.02) -> list:
    """SIGKILL ``proc``'s process group as soon as ``found()`` returns something (or the process ends, or the
    deadline passes); returns what ``found()`` returned last."""
    import os
    import signal
    import time

    hits: list = []
    while time.time() < deadline:
        hits = found()
        if hits or proc.poll() is not None:
            break
        time.sleep(poll)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return hits


# ---- the stage keys of a simulated run (tests/unit/test_registry.py, test_stage.py) ----------------------------
def section_of(stage, cfg):
    """The typed section a stage's key reads (train: the macco run's)."""
    return cfg.train.runs["macco"].config if stage.name == "train" else getattr(cfg, stage.section)


def simulated_keys(cfg) -> dict[str, str]:
    """Every stage's key on a simulated run: each output's content hash a function of its writer's key (as if a
    changed stage wrote changed content), each stage reading those."""
    from flows.config import key_of
    from flows.registry import ORDER
    from flows.stage import stage_key

    content: dict[str, list] = {"source": ["user data"]}
    keys = {}
    for stage in ORDER:
        reads = [content.get(r.rstrip("?")) for r in stage.reads]
        keys[stage.name] = stage_key(stage, reads, section_of(stage, cfg))
        for w in stage.writes:
            content.setdefault(w, []).append(key_of(stage.name, keys[stage.name], w))
    return keys


def downstream_of(names: set[str]) -> set[str]:
    """The stages that read (transitively) what ``names`` write."""
    from flows.registry import ORDER

    out, grew = set(names), True
    while grew:
        grew = False
        for stage in ORDER:
            writes = {w for s in ORDER if s.name in out for w in s.writes}
            if stage.name not in out and writes & {r.rstrip("?") for r in stage.reads}:
                out.add(stage.name)
                grew = True
    return out
