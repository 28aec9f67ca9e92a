#!/bin/bash
# `make corpus`: rebuild the reproduced part of the labelled corpus (corpus/generate/all.py).
# Needs root (tmpfs mounts for disk-full cases, `setpriv` to run as nobody, sbatch as the test
# user). Arguments go to all.py, e.g. `scripts/make-corpus.sh --only local`.
set -euo pipefail
cd "$(dirname "$0")/.."
CVENV=${CORPUS_VENV:-/opt/gpualert/corpus-venv}

# The failing programs run under Debian's python (jobs run as the test user, who cannot read
# /root) with the CPU torch wheel from /opt/wheels when it is there, else from PyPI.
if ! "$CVENV/bin/python" -c "import torch, numpy" 2>/dev/null; then
    echo "make-corpus: creating $CVENV (torch CPU, numpy)"
    /usr/bin/python3 -m venv "$CVENV"
    find_links=()
    [ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)
    "$CVENV/bin/pip" install -q "${find_links[@]}" torch==2.13.0 numpy
fi
chmod -R a+rX "$CVENV"

# The Slurm family needs the test cluster; `up` is harmless when it already runs.
if ! docker/slurm-cluster/cluster up >/tmp/make-corpus-cluster.log 2>&1; then
    echo "make-corpus: test cluster not available (see /tmp/make-corpus-cluster.log):" \
         "the Slurm cases are kept as they are"
fi
export CORPUS_PYTHON="$CVENV/bin/python"
exec /usr/bin/python3 corpus/generate/all.py "$@"
