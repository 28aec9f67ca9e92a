"""The RPM (`make rpm`, packaging/rpm/gpualert-slurm.spec) against the .deb built from the same
tree (`scripts/make-deb.sh`): rpmlint passes (packaging/rpm/rpmlint.toml says why each check
it leaves out is left out), the RPM holds the .deb's files with the .deb's modes and
conffiles, and `rpm -i --root <dir> --nodeps` lays them out as the .deb's data does.

Two places differ by design (packaging/rpm/README.md), and PLACES maps them: the RHEL family's
units are in /usr/lib/systemd/system, and the Python package is in /usr/lib/gpualert/python
with Jinja2, MarkupSafe and PyYAML bundled beside it (RHEL 9's python3-jinja2/-pyyaml are
its Python 3.9's; gpualert needs 3.11). README.RPM stands where README.Debian does.
No RHEL userland can be fetched here, so nothing runs on a RHEL node: the bundled libraries
are imported by this machine's Python 3.11 with no site-packages at all (`-S`)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYLIB = "/usr/lib/gpualert/python/"
# .deb path prefix -> the RPM's
PLACES = {
    "/lib/systemd/system/": "/usr/lib/systemd/system/",
    "/usr/lib/python3/dist-packages/gpualert_slurm/": PYLIB + "gpualert_slurm/",
    "/usr/share/doc/gpualert-slurm/README.Debian": "/usr/share/doc/gpualert-slurm/README.RPM",
}
BUNDLED = ("jinja2/", "markupsafe/", "yaml/", "_yaml/")   # _yaml: PyYAML's shim package
# Files whose bytes differ by design: the console scripts name the RPM's library dir, the
# plugin and man pages are separate builds, the plugstack comment names README.RPM, the
# NVML binding's docstring names the package that bundles it.
OWN_BYTES = {PYLIB + "gpualert_slurm/_vendor/__init__.py",
             "/usr/bin/gpualert", "/usr/bin/gpualert-mailprog", "/usr/lib/gpualert/gpualert.so",
             "/usr/share/man/man1/gpualert.1.gz", "/usr/share/man/man1/gpualert-mailprog.1.gz",
             "/etc/slurm/plugstack.conf.d/gpualert.conf",
             "/usr/share/doc/gpualert-slurm/README.RPM"}


def _version() -> str:
    m = re.search(r'__version__ = "(.+)"', (REPO / "gpualert_slurm" / "__init__.py").read_text())
    assert m
    return m.group(1)


def _run(cmd: list[str], timeout: float = 900, **env: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, env={**os.environ, **env})
    assert p.returncode == 0, f"{cmd}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the .deb, the .rpm), both built here from this tree (make-deb.sh, make-rpm.sh: each
    installs what it builds with once)."""
    out = tmp_path_factory.mktemp("pkgs")
    t0 = time.monotonic()
    # build dirs of their own: not build/deb, which `make deb` or another test may be using
    _run(["scripts/make-deb.sh"], GPUALERT_DEB_DIST=str(out), GPUALERT_DEB_BUILD=str(out / "b-deb"))
    t1 = time.monotonic()
    _run(["scripts/make-rpm.sh"], GPUALERT_RPM_DIST=str(out), GPUALERT_RPM_BUILD=str(out / "b-rpm"))
    print(f"deb {t1 - t0:.0f} s, rpm {time.monotonic() - t1:.0f} s")
    v = _version()
    deb, rpm = out / f"gpualert-slurm_{v}_amd64.deb", out / f"gpualert-slurm-{v}-1.x86_64.rpm"
    assert deb.is_file() and rpm.is_file()
    return deb, rpm


def _mapped(path: str) -> str | None:
    """A .deb path as the RPM has it; None for what only the .deb has (its Python metadata)."""
    if ".dist-info" in path or path.startswith("/usr/lib/python3/dist-packages/gpualert_slurm-"):
        return None
    for old, new in PLACES.items():
        if path.startswith(old):
            return new + path[len(old):]
        if path + "/" == old:                # the directory itself
            return new.rstrip("/")
    return path


def deb_files(deb: Path) -> dict[str, tuple[str, str]]:
    """path (as the RPM has it) -> (type, mode) for every file and directory of the .deb's
    that is gpualert's own (not /, /etc, /usr ...: directories every system has)."""
    out = {}
    for ln in subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                             check=True, timeout=60).stdout.splitlines():
        perms, path = ln.split()[0], ln.split()[-1].removeprefix(".").rstrip("/")
        if not path or (perms[0] == "d" and not _owned_dir(path)):
            continue
        mapped = _mapped(path)
        if mapped is not None:
            out[mapped] = (perms[0], perms)
    return out


def _owned_dir(path: str) -> bool:
    return "gpualert" in path or path in ("/etc/slurm/prolog.d", "/etc/slurm/epilog.d",
                                          "/etc/slurm/plugstack.conf.d")


def rpm_files(rpm: Path) -> dict[str, tuple[str, str]]:
    q = subprocess.run(["rpm", "-qp", "--queryformat", "[%{FILEMODES:perms} %{FILENAMES}\n]",
                        str(rpm)], capture_output=True, text=True, check=True, timeout=60).stdout
    out = {}
    for ln in q.splitlines():
        perms, path = ln.split(" ", 1)
        out[path] = (perms[0], perms)
    return out


def _bundled(path: str) -> bool:
    rest = path.removeprefix(PYLIB)
    return path.startswith(PYLIB) and ((rest + "/").startswith(BUNDLED) or ".dist-info" in rest)


def test_rpmlint_passes(packages: tuple[Path, Path]) -> None:
    p = subprocess.run(["rpmlint", "-c", "packaging/rpm/rpmlint.toml", str(packages[1])],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 errors, 0 warnings" in p.stdout, p.stdout


def test_rpm_holds_the_debs_files_with_its_modes_and_conffiles(
        packages: tuple[Path, Path]) -> None:
    deb, rpm = packages
    d, r = deb_files(deb), rpm_files(rpm)
    bundled = {p for p in r if _bundled(p)}
    # the bundled libraries are there, and nothing compiled among them
    for lib in BUNDLED:
        assert any(p.startswith(PYLIB + lib) and p.endswith("__init__.py") for p in bundled), lib
    assert not [p for p in bundled if p.endswith(".so")], bundled
    own = {p: m for p, m in r.items() if p not in bundled and p != PYLIB.rstrip("/")}
    assert sorted(set(own) - set(d)) == [], "only in the RPM"
    assert sorted(set(d) - set(own)) == [], "only in the .deb"
    assert {p: m for p, m in own.items() if d[p] != m} == {}, "modes differ"
    assert len(d) > 150 and d["/usr/lib/gpualert/gpualert.so"][1] == "-rw-r--r--"
    assert d["/var/spool/gpualert"] == ("d", "drwxr-xr-x")
    conf_deb = set(subprocess.run(["dpkg-deb", "-I", str(deb), "conffiles"], capture_output=True,
                                  text=True, check=True, timeout=60).stdout.split())
    conf_rpm = set(subprocess.run(["rpm", "-qpc", str(rpm)], capture_output=True, text=True,
                                  check=True, timeout=60).stdout.split())
    assert conf_rpm == conf_deb and len(conf_deb) == 5, (conf_rpm, conf_deb)
    # noreplace, as dpkg keeps an admin's edits
    flags = subprocess.run(["rpm", "-qp", "--queryformat", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]",
                            str(rpm)], capture_output=True, text=True, check=True,
                           timeout=60).stdout.splitlines()
    assert {ln.partition(" ")[2] for ln in flags if "n" in ln.partition(" ")[0]} == conf_deb
    # the plugin's Slurm: the headers it was built against, as the .deb's dependency says
    req = subprocess.run(["rpm", "-qpR", str(rpm)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    dep = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    major = re.search(r"slurm-wlm-basic-plugins \(>= ([\d.]+)\)", dep).group(1)
    nxt = re.search(r"slurm-wlm-basic-plugins \(<< ([\d.]+)\)", dep).group(1)
    assert f"(slurm >= {major} with slurm < {nxt})" in req, req
    assert "python3.11" in req.split(), req


def _tree(root: Path) -> dict[str, tuple[int, Path]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = "/" + str(p.relative_to(root))
            if rel.startswith("/var/lib/rpm") or rel.startswith("/usr/lib/sysimage"):
                continue
            out[rel] = (os.lstat(p).st_mode, p)
    return out


def test_rpm_installs_into_a_root_as_the_deb_lays_out(packages: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    deb, rpm = packages
    root, debroot = tmp_path / "root", tmp_path / "deb"
    root.mkdir()
    subprocess.run(["dpkg-deb", "-x", str(deb), str(debroot)], check=True, timeout=120)
    # (--dbpath: Debian's rpm keeps its database in ~/.rpmdb; RHEL's is /var/lib/rpm)
    p = subprocess.run(["rpm", "-i", "--root", str(root), "--dbpath", "/var/lib/rpm", "--nodeps",
                        str(rpm)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "installed, not enabled" in p.stdout, p.stdout   # %post ran (Lua: no shell there)
    got, want = _tree(root), {}
    for rel, (mode, path) in _tree(debroot).items():
        mapped = _mapped(rel)
        if mapped is not None and (not stat.S_ISDIR(mode) or _owned_dir(rel)):
            want[mapped] = (mode, path)
    for rel, (mode, path) in want.items():
        assert rel in got, f"{rel}: not laid out by rpm -i"
        assert stat.filemode(got[rel][0]) == stat.filemode(mode), rel
        if stat.S_ISREG(mode) and rel not in OWN_BYTES:
            assert got[rel][1].read_bytes() == path.read_bytes(), rel
    extra = {r for r, (m, _) in got.items() if r not in want and not stat.S_ISDIR(m)
             and not _bundled(r)}
    assert extra == set(), extra
    # The commands name RHEL 9's Python 3.11 and the package's own library dir...
    head = (root / "usr/bin/gpualert").read_text().splitlines()
    assert head[0] == "#!/usr/bin/python3.11" and f'sys.path.insert(0, "{PYLIB[:-1]}")' in head
    # ...where the bundled libraries suffice: every module of gpualert_slurm imports with no
    # site-packages at all (python3.11 -S), Jinja2 renders, YAML loads.
    code = (f"import sys, pkgutil, importlib; sys.path.insert(0, {str(root) + PYLIB!r});"
            "import gpualert_slurm, jinja2, yaml;"
            f"assert jinja2.__file__.startswith({str(root)!r}), jinja2.__file__;"
            "assert jinja2.Template('{{ x }}!').render(x=1) == '1!';"
            "assert yaml.safe_load('a: [1]') == {'a': [1]};"
            "[importlib.import_module(m.name) for m in pkgutil.walk_packages("
            "gpualert_slurm.__path__, 'gpualert_slurm.') if '_vendor' not in m.name "
            "and not m.name.endswith('__main__')];"
            "print('ok')")
    r = subprocess.run(["/usr/bin/python3.11", "-S", "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
    # The plugstack line ships disabled, as the .deb's
    conf = (root / "etc/slurm/plugstack.conf.d/gpualert.conf").read_text()
    assert "\n#optional /usr/lib/gpualert/gpualert.so " in conf and "\noptional" not in conf
