#!/bin/bash
# `make corpus`: rebuild the tuning corpus from its set file (corpus/gen/sets/corpus.yaml) with
# the one corpus generator (corpus/gen/build.py), then check its targets and labels and rewrite
# the counts in corpus/README.md (corpus/stats.py --check --readme).
# Needs root (tmpfs mounts for disk-full cases, `setpriv` to run as nobody, sbatch as the test
# user). Arguments go to build.py, e.g. `scripts/make-corpus.sh --only hang- storage-` or
# `--kind run synthetic` (the Slurm cases need the test cluster and take the longest).
# Held-out sets are built on purpose only: `python3 corpus/gen/build.py holdout3`.
set -euo pipefail
cd "$(dirname "$0")/.."
FVENV=${CORPUS_VENV:-/opt/gpualert-corpus-venv}
find_links=()
[ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)

# The failing programs run under Debian's python (jobs and `nobody` runs cannot read /root),
# in a venv with the frameworks they fail inside (CPU builds). DeepSpeed's setup imports torch,
# so it comes last, without build isolation and without ops.
if ! "$FVENV/bin/python" -c "import torch, tensorflow, jax, lightning, transformers, ray, submitit, deepspeed" 2>/dev/null; then
    echo "make-corpus: creating $FVENV (torch, tensorflow-cpu, jax, lightning, transformers, ray, submitit, deepspeed)"
    /usr/bin/python3 -m venv "$FVENV"
    "$FVENV/bin/pip" install -q "${find_links[@]}" torch==2.13.0 numpy
    "$FVENV/bin/pip" install -q "${find_links[@]}" tensorflow-cpu==2.21.0 "jax[cpu]==0.10.2" \
        lightning==2.6.6 transformers==5.24.0 accelerate==1.15.0 ray==2.60.0 submitit==1.5.4
    DS_BUILD_OPS=0 "$FVENV/bin/pip" install -q --no-build-isolation deepspeed==0.19.8
fi
# joblib (loky's process pool: the f9r-*-loky-* cases)
"$FVENV/bin/python" -c "import joblib" 2>/dev/null \
    || "$FVENV/bin/pip" install -q "${find_links[@]}" joblib==1.6.0
chmod -R a+rX "$FVENV"

# Debian packages some cases run: Open MPI's mpirun (f5g-nodefail-mpirun-daemon-killed, f6r-*),
# the JDK (f6j-* compile and run F6Jobs.java), Go, Rust, R, gfortran and Node.js (f7r-* build
# and run progs/native/f7_jobs.*), the data-prep tools of the f9t- cases (and holdout9's)
DEB_PACKAGES=(openmpi-bin openjdk-17-jdk-headless golang-go rustc r-base-core gfortran nodejs
              lz4 unzip wget curl jq gawk)
missing=()
for p in "${DEB_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    echo "make-corpus: Debian packages: ${missing[*]}"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Libraries of the f6*- cases (and holdout6's), kept out of the corpus venv so that its
# import-error cases stay as they are: the programs append this directory to sys.path.
HO6=/opt/gpualert-ho6/site-packages
if ! PYTHONPATH=$HO6 "$FVENV/bin/python" -c "import pyarrow, pandas, sklearn, numba, lightgbm, hydra, omegaconf, datasets" 2>/dev/null; then
    echo "make-corpus: installing pyarrow, pandas, scikit-learn, numba, lightgbm, hydra-core, datasets into $HO6"
    "$FVENV/bin/pip" install -q "${find_links[@]}" --target "$HO6" pandas==3.1.1 pyarrow==26.0.1 \
        scikit-learn==1.9.1 numba==0.68.1 lightgbm==4.7.0 hydra-core==1.3.8 omegaconf==2.3.1 \
        datasets==5.2.0
    chmod -R a+rX "$HO6"
fi

# Libraries of the f8a- cases (and holdout8's): file formats and query engines (DuckDB, FAISS,
# ONNX / ONNX Runtime, Polars), kept out of the corpus venv like the ones above. --no-deps: their
# dependencies (numpy, protobuf) are the venv's, as when holdout8 was built.
HO8=/opt/gpualert-ho8/site-packages
if ! PYTHONPATH=$HO8 "$FVENV/bin/python" -c "import duckdb, faiss, onnx, onnxruntime, polars" 2>/dev/null; then
    echo "make-corpus: installing duckdb, faiss-cpu, onnx, onnxruntime, polars into $HO8"
    "$FVENV/bin/pip" install -q "${find_links[@]}" --no-deps --target "$HO8" duckdb==2.0.1 \
        faiss-cpu==1.15.1 onnx==1.23.2 onnxruntime==1.32.0 polars==2.1.0 polars-runtime-32==2.1.0
    chmod -R a+rX "$HO8"
fi

# The f10k- cases' tools (py-spy dumping a stuck trainer, a Dask LocalCluster whose worker runs
# out of its memory budget), kept out of the corpus venv like the ones above
F10K=/opt/gpualert-f10k/site-packages
if ! PYTHONPATH=$F10K "$FVENV/bin/python" -c "import dask, distributed" 2>/dev/null \
        || [ ! -x "$F10K/bin/py-spy" ]; then
    echo "make-corpus: installing py-spy, dask[distributed] into $F10K"
    "$FVENV/bin/pip" install -q "${find_links[@]}" --target "$F10K" py-spy==0.4.3 \
        "dask[distributed]==2026.8.0"
    chmod -R a+rX "$F10K"
fi

# The Slurm cases need the test cluster; `up` is harmless when it already runs.
kinds=()
if ! docker/slurm-cluster/cluster up >/tmp/make-corpus-cluster.log 2>&1; then
    echo "make-corpus: test cluster not available (see /tmp/make-corpus-cluster.log):" \
         "the Slurm cases are kept as they are"
    kinds=(--kind run synthetic variant)
fi
/usr/bin/python3 corpus/gen/build.py corpus --python "$FVENV/bin/python" "${kinds[@]}" "$@"
/usr/bin/python3 corpus/stats.py --check --readme
