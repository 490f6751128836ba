#!/usr/bin/env bash
# The GPU script lives in bench/gpu/ (bench/gpu/README.md): `make gpu-wheels` here, then on the lent machine,
# with bench/gpu/.carry carried, `bash bench/gpu/run.sh` (this forwards to it).
exec bash "$(dirname "$0")/gpu/run.sh" "$@"
