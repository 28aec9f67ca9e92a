#!/bin/bash
# pytest exiting 5 (nothing collected) must fail the build, not pass it silently.
set -u
cd "$(dirname "$0")/.."
PY=${GPUALERT_VENV:-/opt/gpualert/venv}/bin/python
"$PY" -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "run-pytest: no tests were collected - treating as a failure" >&2
    exit 1
fi
exit "$rc"
