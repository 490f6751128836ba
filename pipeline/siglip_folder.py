"""A SigLIP-style model folder built from captions: a SentencePiece-style tokenizer trained on them and the
architecture's open_clip config, for ``local-dir:`` (the synthetic world's SigLIP demo trains its own: there is no
hub to download one from, and no held-out caption may inform it — the caller passes the training split).

The tokenizer: byte-pair merges over Metaspace pre-tokens (SentencePiece's word-start marker), ``</s>`` appended,
``<pad>`` = 0 (T5 / SigLIP's layout), trained with the ``tokenizers`` library and saved as a Hugging Face fast
tokenizer; open_clip's ``HFTokenizer`` reads it from the folder (``text_cfg.hf_tokenizer_name``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from data_schemas.config import check_choices, check_ranges

# the flow's value for "the folder the tokenizer stage built" in parse.clip_model, masks.models and train.arch
BUILT = "built:tokenizer"


@dataclass
class TokenizerConfig:
    """The flow's ``tokenizer`` stage: with ``arch`` (a repo SigLIP architecture, e.g. macco-siglip-demo) it
    builds a model folder from the training split's captions; ``built:tokenizer`` elsewhere names that folder."""
    arch: str | None = None  # None: no tokenizer stage (the CLIP BPE, or a folder the user provides)
    vocab_size: int = 1000
    context_length: int = 32
    clean: Literal["canonicalize", "lower", "whitespace"] = "canonicalize"  # open_clip's cleaning (SigLIP's)

    def __post_init__(self):
        check_choices(self, "tokenizer")
        check_ranges(self, "tokenizer", positive=("vocab_size", "context_length"))


def build_siglip_folder(captions: list[str], out: str | Path, model_cfg: dict | None = None,
                        context_length: int = TokenizerConfig.context_length,
                        vocab_size: int = TokenizerConfig.vocab_size, clean: str = TokenizerConfig.clean) -> str:
    """Write the folder (tokenizer files + open_clip_config.json with ``model_cfg`` and the tokenizer's text
    settings); returns its ``local-dir:`` name. Without weights, open_clip initialises such a model randomly."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if not captions:
        raise ValueError("build_siglip_folder: no captions to train the tokenizer on")
    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    tk.train_from_iterator(captions, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                                         special_tokens=["<pad>", "</s>", "<unk>"]))
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    cfg = {"model_cfg": dict(model_cfg or {})}
    text = dict(cfg["model_cfg"].get("text_cfg", {}))
    if text.get("vocab_size", len(fast)) < len(fast):
        raise ValueError(f"build_siglip_folder: the tokenizer has {len(fast)} tokens, the model's text tower "
                         f"{text['vocab_size']}")
    cfg["model_cfg"]["text_cfg"] = {**text, "hf_tokenizer_name": "local", "context_length": context_length,
                                    "tokenizer_kwargs": {"clean": clean}}
    (out / "open_clip_config.json").write_text(json.dumps(cfg, indent=2))
    return f"local-dir:{out}"
