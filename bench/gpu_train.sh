#!/usr/bin/env bash
# ViT-B/32 MACCO and CLIP-FT training steps at batch 256 (bf16, fused AdamW, synthetic images) on one GPU:
# samples/s and peak memory, < 10 minutes. `bench/gpu.sh` adds grounding and evaluation figures.
set -euo pipefail
cd "$(dirname "$0")/.."
timeout 540 "${PY:-.venv/bin/python}" bench/gpu.py --train-only
