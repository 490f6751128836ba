#!/usr/bin/env bash
# One GPU script (< 10 minutes on one GPU): training steps, GroundingDINO at 800 px, evaluation throughput.
# Usage: bash bench/gpu.sh | tee bench/gpu_results.md
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=${PY:-.venv/bin/python}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 540 "$PY" bench/gpu.py
