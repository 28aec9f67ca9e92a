#!/bin/bash
# `make deb`: builds dist/gpualert-slurm_<version>_amd64.deb with dpkg-buildpackage, from a copy
# of the package's sources in build/deb/ (dpkg-buildpackage writes into the tree it builds and
# into its parent: never into the checkout). Installs the build dependencies first, once.
# Needs `make install` before (the bundled nvidia-ml-py binding is taken from its venv).
# --deps-only: install the build dependencies and stop.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/opt/gpualert}
BUILD_DEPS=(debhelper dh-python python3-all python3-setuptools python3-wheel
            pybuild-plugin-pyproject libslurm-dev dpkg-dev fakeroot build-essential help2man)
missing=()
for p in "${BUILD_DEPS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "make-deb: build dependencies: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "${1:-}" = --deps-only ] && exit 0   # a builder image (tests/test_deb_package.py) stops here

version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' gpualert_slurm/__init__.py)
changelog=$(dpkg-parsechangelog -l debian/changelog -S Version)
[ "$version" = "$changelog" ] || {
    echo "make-deb: gpualert_slurm.__version__ is $version but debian/changelog says $changelog" >&2
    exit 1; }

out=${GPUALERT_DEB_BUILD:-build/deb}   # another dir: builds side by side (tests/test_rpm_package.py)
src=$out/gpualert-slurm-$version
rm -rf "$out"
dist=${GPUALERT_DEB_DIST:-dist}
mkdir -p "$src" "$dist"
# What the package is made of (not the corpus, tests or benchmarks).
cp -a pyproject.toml setup.cfg README.md gpualert_slurm spank epilog.d etc ood debian "$src/"
mkdir -p "$src/docs" && cp -a docs/*.md "$src/docs/"
find "$src" \( -name __pycache__ -o -name '*.egg-info' -o -name '*.o' -o -name '*.so' \) -prune \
    -exec rm -rf {} +
# NVIDIA's NVML binding is not in Debian (docs/ADMIN.md, "The Debian package"): the one-file module
# nvidia-ml-py installs, as gpualert_slurm/_vendor/pynvml.py.
# GPUALERT_PYNVML (and GPUALERT_PYNVML_VERSION) name another copy of that file: a build
# machine without the venv.
pynvml=${GPUALERT_PYNVML:-$("$PREFIX/venv/bin/python" -c 'import pynvml; print(pynvml.__file__)')}
nvver=${GPUALERT_PYNVML_VERSION:-$("$PREFIX/venv/bin/python" -m pip show nvidia-ml-py \
    2>/dev/null | sed -n 's/^Version: //p' || true)}
mkdir -p "$src/gpualert_slurm/_vendor"
echo '"""Bundled by the Debian package (not in Debian): nvidia-ml-py '"$nvver"', BSD-3-Clause."""' \
    > "$src/gpualert_slurm/_vendor/__init__.py"
cp "$pynvml" "$src/gpualert_slurm/_vendor/pynvml.py"

t0=$SECONDS
# Debian's own python3 and tools, never a per-user interpreter earlier in PATH (pyenv).
(cd "$src" && PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -b -us -uc --no-sign) > "$out/build.log" 2>&1 \
    || { tail -n 40 "$out/build.log" >&2; echo "make-deb: dpkg-buildpackage failed ($out/build.log)" >&2; exit 1; }
deb=gpualert-slurm_${version}_amd64.deb
mv -f "$out/$deb" "$dist/"
echo "make-deb: $dist/$deb ($((SECONDS - t0)) s; log $out/build.log)"
