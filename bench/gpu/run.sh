#!/usr/bin/env bash
# The GPU run on the lent machine (bench/gpu/README.md): its own python3, the carried wheels in a private target
# directory, every section time-boxed (< 8 min in all). Writes $OUT/gpu_results.md (else bench/gpu_results.md).
# Here first: `make gpu-wheels` (bench/gpu/.carry); then there, with bench/gpu/.carry carried: bash bench/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PY:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
timeout 540 "$PY" bench/gpu/run.py "$@"
