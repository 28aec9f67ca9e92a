#!/bin/bash
# What the tests need beyond the product's own install, made by `make test` itself (a fresh
# machine has nothing else): the unprivileged test user the jobs run as (the cluster script makes
# it too, but tests that own files by it run before any cluster is up), and a venv with PyTorch
# (CPU) for the tests that run a real torch.multiprocessing.spawn job and a real torchrun.
# `make corpus` keeps its own, larger venv. Safe to run again: each step is skipped when done.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/opt/gpualert}
TVENV=${GPUALERT_TORCH_VENV:-$PREFIX/torch-venv}
mkdir -p "$PREFIX"
exec 9>"$PREFIX/.install-test.lock"
flock 9
TEST_USER=gpatest   # docker/slurm-cluster/cluster and tests/clusterlib.py use the same name
id -u "$TEST_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash --user-group "$TEST_USER"
# A second unprivileged user: the web pages' tests show that one user's app never shows
# another's jobs (tests/test_web*.py, tests/weblib.py).
id -u gpatest2 >/dev/null 2>&1 || useradd --create-home --shell /bin/bash --user-group gpatest2
# Phusion Passenger (Debian's), which serves ood/gpualert/passenger_wsgi.py in the tests as
# Open OnDemand's per-user server does.
if ! command -v passenger >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends passenger >/dev/null
fi
if "$TVENV/bin/python" -c "import torch.distributed.run, torch.multiprocessing" 2>/dev/null; then
    exit 0
fi
find_links=()
# The CPU build where the machine has it on disk; otherwise the registry's (larger) build.
[ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)
echo "install-test-deps: $TVENV (torch 2.13.0, CPU where available)"
/usr/bin/python3 -m venv "$TVENV"
"$TVENV/bin/pip" install -q "${find_links[@]}" torch==2.13.0 numpy
chmod -R a+rX "$TVENV"
