#!/usr/bin/env bash
# Only the GPU script's training-step sections (ViT-B/32 MACCO and CLIP-FT at batch 256, fp16 + GradScaler and
# bf16, eager and torch.compile); the whole script is bench/gpu/run.sh (bench/gpu/README.md).
exec bash "$(dirname "$0")/gpu/run.sh" --sections train compile "$@"
