#!/bin/bash
# `make rpm`: builds dist/gpualert-slurm-<version>-1.x86_64.rpm from packaging/rpm/gpualert-slurm.spec
# with rpmbuild (Debian's `rpm` package here; installed with rpmlint once), in build/rpm/.
# The plugin is built against the Slurm headers under SLURM_PREFIX (default /usr: this
# machine's libslurm-dev); the Python libraries the package bundles (Jinja2, MarkupSafe, PyYAML:
# packaging/rpm/README.md says why) are taken, pure Python, from the venv `make install` made,
# as is the NVML binding make-deb.sh bundles.
# Environment: SLURM_PREFIX, GPUALERT_RPM_DIST (output dir, default dist), GPUALERT_RPM_BUILD
# (the build dir, default build/rpm), GPUALERT_RPM_PYTHON
# (the interpreter the commands name, default /usr/bin/python3.11), PREFIX (the venv's).
# --deps-only: install rpm and rpmlint and stop.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/opt/gpualert}
VENV_PY=$PREFIX/venv/bin/python
missing=()
for p in rpm rpmlint; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "make-rpm: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "${1:-}" = --deps-only ] && exit 0

version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' gpualert_slurm/__init__.py)
slurm_prefix=${SLURM_PREFIX:-/usr}
[ -f "$slurm_prefix/include/slurm/spank.h" ] || {
    echo "make-rpm: no Slurm headers under $slurm_prefix/include/slurm (SLURM_PREFIX)" >&2; exit 1; }
top=$(realpath -m "${GPUALERT_RPM_BUILD:-build/rpm}")
src=$top/SOURCES/gpualert-slurm-$version
rm -rf "$top"
mkdir -p "$src" "$top/SPECS"
dist=${GPUALERT_RPM_DIST:-dist}
mkdir -p "$dist"
# What the package is made of: the .deb's sources (make-deb.sh), plus packaging/rpm.
cp -a pyproject.toml setup.cfg README.md gpualert_slurm spank epilog.d etc ood "$src/"
mkdir -p "$src/docs" "$src/debian" "$src/packaging/rpm"
cp -a docs/*.md "$src/docs/"
cp -a debian/changelog "$src/debian/"
cp -a packaging/rpm/README.RPM packaging/rpm/copyright "$src/packaging/rpm/"
find "$src" \( -name __pycache__ -o -name '*.egg-info' -o -name '*.o' -o -name '*.so' \) -prune \
    -exec rm -rf {} +
# The NVML binding, as the .deb bundles it.
pynvml=${GPUALERT_PYNVML:-$("$VENV_PY" -c 'import pynvml; print(pynvml.__file__)')}
nvver=${GPUALERT_PYNVML_VERSION:-$("$VENV_PY" -m pip show nvidia-ml-py 2>/dev/null | sed -n 's/^Version: //p' || true)}
mkdir -p "$src/gpualert_slurm/_vendor"
echo '"""Bundled by the package (not in Debian or RHEL): nvidia-ml-py '"$nvver"', BSD-3-Clause."""' \
    > "$src/gpualert_slurm/_vendor/__init__.py"
cp "$pynvml" "$src/gpualert_slurm/_vendor/pynvml.py"
# Jinja2, MarkupSafe, PyYAML for Python 3.11 (RHEL 9's python3-jinja2/-pyyaml are 3.9's): pure
# Python, no compiled speedups (MarkupSafe and PyYAML fall back to their Python code), with
# their licences.
"$VENV_PY" - "$src/bundled" <<'PY'
import importlib.metadata as md, pathlib, shutil, sys
out = pathlib.Path(sys.argv[1])
for dist in ("Jinja2", "MarkupSafe", "PyYAML"):
    d = md.distribution(dist)
    for f in d.files:
        p = pathlib.Path(d.locate_file(f))
        if f.suffix in (".so", ".pyc", ".c", ".pyx") or "__pycache__" in f.parts or not p.is_file():
            continue
        top = f.parts[0]
        if top.endswith(".dist-info") and not ("licenses" in f.parts or f.name.startswith(("LICENSE", "METADATA"))):
            continue
        if top in ("..",) or top.endswith(".data"):
            continue
        dst = out / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dst)
PY
tar -C "$top/SOURCES" --owner=0 --group=0 --mtime=@0 -czf "$top/SOURCES/gpualert-slurm-$version.tar.gz" \
    "gpualert-slurm-$version"
cp packaging/rpm/gpualert-slurm.spec "$top/SPECS/"

t0=$SECONDS
# --nodeps: this machine's build dependencies are dpkg's, not in an rpm database.
PATH=/usr/sbin:/usr/bin:/sbin:/bin rpmbuild -bb --nodeps \
    --define "_topdir $top" --define "gpa_version $version" --define "slurm_prefix $slurm_prefix" \
    --define "gpa_python ${GPUALERT_RPM_PYTHON:-/usr/bin/python3.11}" \
    --define "gpa_pip $VENV_PY -m pip" --define "_build_id_links none" \
    "$top/SPECS/gpualert-slurm.spec" > "$top/build.log" 2>&1 \
    || { tail -n 40 "$top/build.log" >&2; echo "make-rpm: rpmbuild failed ($top/build.log)" >&2; exit 1; }
rpm=gpualert-slurm-$version-1.x86_64.rpm
mv -f "$top/RPMS/x86_64/$rpm" "$dist/"
echo "make-rpm: $dist/$rpm ($((SECONDS - t0)) s; log $top/build.log)"
