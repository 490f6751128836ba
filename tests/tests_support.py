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
        group = next((g for g in ("parse-shard", "ground-shard", "train", "evaluate") if r.name.startswith(g)), r.name)
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
