#!/usr/bin/env bash
# Real GPU failures under `gpualert run`, for the device tool in one call:
#
#   run(command="bash bench/gpu/reproduce.sh", timeout_s=300)
#
# The tool sets OUT; results land in $OUT (summary.json, one directory per case). The project
# runs from this checkout (PYTHONPATH, no install) with the image's python3. Elsewhere:
#   OUT=/tmp/gpu-out bash bench/gpu/reproduce.sh [--budget S] [--only CASE,...] [--no-gpu] [--list]
# (OUT unset: bench/out/gpu). PYTHON picks the interpreter (default python3). Without a GPU each
# case runs its CPU half and is recorded 'skipped: no GPU (why)'; the exit status is then 0.
# bench/gpu/README.md and reproduce.py's docstring describe the layout.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${OUT:-$repo/bench/out/gpu}
cd "$repo" || exit 1
exec "${PYTHON:-python3}" "$here/reproduce.py" --out "$out" "$@"
