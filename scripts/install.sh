#!/bin/bash
# Installs everything gpualert-slurm needs on a Debian machine, as root. Safe to run again:
# each step is skipped when already done, so `make test` after `make demo` costs seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/opt/gpualert}
VENV=$PREFIX/venv

# Concurrent installs (parallel test runs, several developers on one machine) must not run pip
# in the same venv at once.
mkdir -p "$PREFIX"
exec 9>"$PREFIX/.install.lock"
flock 9

# libfuse2 is libfuse2t64 from Debian 13 on (the 64-bit time_t transition renamed it)
. /etc/os-release
LIBFUSE2=libfuse2
[ "${VERSION_ID%%.*}" -ge 13 ] 2>/dev/null && LIBFUSE2=libfuse2t64
DEB_PACKAGES=(python3 python3-venv python3-dev gcc make libslurm-dev slurm-wlm-plugins-dev
              slurmctld slurmd slurm-client slurmdbd munge mariadb-server
              chromium "$LIBFUSE2"  # chromium: the report's HTML render test; libfuse2: fusepy's
                                    # library (tests/fuse_stall.py, the stalled-spool test)
              libc-l10n  # glibc's messages in other locales (the localised "Killed" test)
              docker.io debootstrap)  # the container cluster (docker/slurm-cluster/dcluster)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install: Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # Debian's service scripts must not start daemons here: the cluster script owns them.
    made_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
        made_policy=1
    fi
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
fi

# Debian's own Python (not a per-user interpreter under /root): jobs run as other users and
# must be able to execute the same venv the hooks use.
if [ ! -x "$VENV/bin/python" ]; then
    echo "install: virtual environment $VENV"
    mkdir -p "$PREFIX"
    /usr/bin/python3 -m venv "$VENV"
fi
stamp=$VENV/.deps-stamp
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ scripts/install.sh -nt "$stamp" ]; then
    "$VENV/bin/pip" install -q --upgrade pip setuptools wheel
    # prometheus_client: the tests parse `gpualert metrics` output with its text parser.
    # matplotlib: the report's timeline picture of multi-node failures (docs/ADMIN.md, "Dependencies, and why each").
    # import-linter: the package's layering and no-cycle contracts (.importlinter, make lint).
    # mypy, types-PyYAML: the type check of core, recovery and notify (pyproject.toml, make lint).
    "$VENV/bin/pip" install -q Jinja2 PyYAML nvidia-ml-py apprise matplotlib pytest aiosmtpd ruff \
        fusepy prometheus_client import-linter mypy types-PyYAML
    touch "$stamp"
fi
# Not editable: the hooks and jobs (other users) import the installed copy, never the checkout.
# setuptools copies into build/lib and never removes from it: a module deleted from the checkout
# would still be installed (and hide a missed importer), so that copy is made afresh each time.
rm -rf build/lib
"$VENV/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall . >/dev/null
chmod -R a+rX "$PREFIX"
# The rule cache (gpualert_slurm/classify/rulecache.py, /var/cache/gpualert): built here as root,
# so that the first epilog and every user's `gpualert classify` load it instead of building the
# rules (0.2 s of every run). Not fatal: without it, each run builds the rules itself.
# (From /: the installed copy, not this checkout, is what the key is taken of.)
(cd / && "$VENV/bin/python" -m gpualert_slurm.classify.build_cache) \
    || echo "install: no rule cache (above); gpualert classify builds the rules each run" >&2

make -s -C spank
make -s -C spank install PREFIX="$PREFIX"
echo "install: done ($VENV, plugin $PREFIX/lib/gpualert.so)"
