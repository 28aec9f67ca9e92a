#!/bin/bash
# `make corpus`: rebuild the reproduced part of the labelled corpus: the older families
# (corpus/generate/all.py), then the cases of the tuning corpus's set file
# (corpus/gen/sets/corpus.yaml: really-run cuda_setup cases, the log-shape variants, which are
# made from the rebuilt cases) with the one corpus generator, corpus/gen/build.py.
# Needs root (tmpfs mounts for disk-full cases, `setpriv` to run as nobody, sbatch as the test
# user). Arguments go to all.py, e.g. `scripts/make-corpus.sh --only local`; with arguments the
# set file is not rebuilt (CORPUS_SETS=1 forces it). Held-out sets are built on purpose only:
# `python3 corpus/gen/build.py holdout3`.
set -euo pipefail
cd "$(dirname "$0")/.."
CVENV=${CORPUS_VENV:-/opt/gpualert/corpus-venv}
FVENV=${CORPUS_FRAMEWORK_VENV:-/opt/gpualert-corpus-venv}
find_links=()
[ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)

# The failing programs run under Debian's python (jobs run as the test user, who cannot read
# /root) with the CPU torch wheel from /opt/wheels when it is there, else from PyPI.
if ! "$CVENV/bin/python" -c "import torch, numpy" 2>/dev/null; then
    echo "make-corpus: creating $CVENV (torch CPU, numpy)"
    /usr/bin/python3 -m venv "$CVENV"
    "$CVENV/bin/pip" install -q "${find_links[@]}" torch==2.13.0 numpy
fi
chmod -R a+rX "$CVENV"

# The set files' programs fail inside real frameworks: a second venv with them (CPU builds).
# DeepSpeed's setup imports torch, so it comes last, without build isolation and without ops.
if ! "$FVENV/bin/python" -c "import torch, tensorflow, jax, lightning, transformers, ray, submitit, deepspeed" 2>/dev/null; then
    echo "make-corpus: creating $FVENV (torch, tensorflow-cpu, jax, lightning, transformers, ray, submitit, deepspeed)"
    /usr/bin/python3 -m venv "$FVENV"
    "$FVENV/bin/pip" install -q "${find_links[@]}" torch==2.13.0 numpy
    "$FVENV/bin/pip" install -q "${find_links[@]}" tensorflow-cpu==2.21.0 "jax[cpu]==0.10.2" \
        lightning==2.6.6 transformers==5.24.0 accelerate==1.15.0 ray==2.60.0 submitit==1.5.4
    DS_BUILD_OPS=0 "$FVENV/bin/pip" install -q --no-build-isolation deepspeed==0.19.8
fi
chmod -R a+rX "$FVENV"

# The Slurm family needs the test cluster; `up` is harmless when it already runs.
if ! docker/slurm-cluster/cluster up >/tmp/make-corpus-cluster.log 2>&1; then
    echo "make-corpus: test cluster not available (see /tmp/make-corpus-cluster.log):" \
         "the Slurm cases are kept as they are"
fi
export CORPUS_PYTHON="$CVENV/bin/python"
/usr/bin/python3 corpus/generate/all.py "$@"
if [ $# -eq 0 ] || [ "${CORPUS_SETS:-0}" = 1 ]; then
    /usr/bin/python3 corpus/gen/build.py corpus --python "$FVENV/bin/python"
    /usr/bin/python3 corpus/stats.py --check
fi
