"""The Debian package (`make deb`, debian/): installed with `apt-get install ./…deb` on a clean
container node (the container cluster's Debian 12 image: Slurm, munge and Python from Debian,
no gpualert), enabled as README.Debian says, a failing job ends in a report in a real SMTP sink,
and `apt-get remove` leaves no gpualert process running and slurm.conf as it was.

The node is one container (`gpadeb-node`, not the container cluster's `gpadock-*`) running
its own slurmctld and slurmd on ports of its own (+700: 7517, 7531); it uses the host's network
so that apt reaches Debian's mirror for the package's dependencies and the job epilog reaches
the sink on 127.0.0.1. Measured: see docs/ADMIN.md, "The Debian package"."""

from __future__ import annotations

import email
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from email import policy
from pathlib import Path

import clusterlib
import pytest
from dockerlib import DCLUSTER

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parent.parent
NAME = "gpadeb-node"
CTLD_PORT, NODE_PORT = 7517, 7531

SLURM_CONF = """# the site's slurm.conf before gpualert (one controller, one node)
ClusterName=gpadeb
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={node}
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurmctld.log
SlurmdLogFile=/var/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
MailProg=/bin/true
NodeName=dn1 NodeHostname={host} NodeAddr=127.0.0.1 Port={node} CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=dn1 Default=YES MaxTime=10 State=UP
"""

# README.Debian, step 4.
ENABLE_LINES = """
# gpualert (README.Debian step 4)
PrologFlags=Alloc
Prolog=/etc/slurm/prolog.d/*
Epilog=/etc/slurm/epilog.d/*
EpilogSlurmctld=/etc/slurm/gpualert-epilog-slurmctld
PrologEpilogTimeout=60
"""


def sh(cmd: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A bash command line in the node container, as root."""
    p = subprocess.run(["docker", "exec", NAME, "bash", "-c", cmd], capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError(f"in {NAME}: {cmd}\nexit {p.returncode}\n{p.stdout[-3000:]}"
                             f"\n{p.stderr[-3000:]}\n{logs()}")
    return p


def logs() -> str:
    p = subprocess.run(["docker", "exec", NAME, "bash", "-c",
                        "tail -n 15 /var/log/slurmctld.log /var/log/slurmd.log "
                        "/var/spool/gpualert/gpualert-hooks.log 2>&1"],
                       capture_output=True, text=True, timeout=30)
    return p.stdout[-4000:]


def write(path: str, text: str, mode: str = "0644") -> None:
    p = subprocess.run(["docker", "exec", "-i", NAME, "bash", "-c",
                        f"cat > {shlex.quote(path)} && chmod {mode} {shlex.quote(path)}"],
                       input=text, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr


LISTER = """
import json, os
me = os.getpid()
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == me:
        continue
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
        maps = open(f"/proc/{pid}/maps").read()
    except OSError:
        continue
    mapped = sorted({line.split(None, 5)[-1] for line in maps.splitlines()
                     if "gpualert" in line})
    if "gpualert" in cmd or mapped:
        print(json.dumps({"pid": int(pid), "cmd": cmd, "maps": mapped}))
"""


def gpualert_processes(cmd_only: bool = False) -> list[dict]:
    """The node's processes that run gpualert (its console scripts) or map a file of it (the
    plugin, in slurmd and slurmstepd): pid, cmd, maps."""
    p = subprocess.run(["docker", "exec", "-i", NAME, "python3", "-"], input=LISTER,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    procs = [json.loads(line) for line in p.stdout.splitlines()]
    return [r for r in procs if "gpualert" in r["cmd"]] if cmd_only else procs


def wait(predicate, timeout: float, what: str):  # noqa: ANN001, ANN201 - test helper
    return clusterlib.wait_until(predicate, timeout, what, diagnose=logs)


def _image(suite: str) -> str:
    """The container cluster's image of that Debian release (Slurm from its packages)."""
    p = subprocess.run([str(DCLUSTER), "image"], capture_output=True, text=True, timeout=1800,
                       stdin=subprocess.DEVNULL, env={**os.environ,
                                                      "GPUALERT_DCLUSTER_SUITE": suite})
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.strip().splitlines()[-1]


def _builder(suite: str) -> str:
    """The release's image with make-deb.sh's build dependencies installed, kept (docker
    commit) under a tag made of the image's and of make-deb.sh's: built once per machine."""
    import hashlib

    image = _image(suite)
    script = REPO / "scripts" / "make-deb.sh"
    tag = "gpualert-debbuild:" + hashlib.sha256(
        image.encode() + script.read_bytes()).hexdigest()[:12]
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True,
                      timeout=60).returncode == 0:
        return tag
    name = f"gpadeb-build-{suite}"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    p = subprocess.run(["docker", "run", "--name", name, "--network", "host", "-v",
                        f"{script}:/make-deb.sh:ro", image, "bash", "-c",
                        "apt-get update -qq && /make-deb.sh --deps-only && "
                        "rm -rf /var/lib/apt/lists/*"], capture_output=True, text=True,
                       timeout=1200, stdin=subprocess.DEVNULL)
    try:
        assert p.returncode == 0, f"build deps in {suite}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}"
        c = subprocess.run(["docker", "commit", "--change",
                            f"LABEL gpualert-debbuild-suite={suite}", name, tag],
                           capture_output=True, text=True, timeout=600)
        assert c.returncode == 0, c.stderr
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)
    # the release's older builders (another make-deb.sh or image): 1 GB each under vfs
    old = subprocess.run(["docker", "images", "-q", "--filter",
                          f"label=gpualert-debbuild-suite={suite}", "--format",
                          "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True,
                         timeout=60).stdout.split()
    for t in old:
        if t != tag:
            subprocess.run(["docker", "rmi", t], capture_output=True, timeout=120)
    return tag


def _version() -> str:
    m = re.search(r'__version__ = "(.+)"', (REPO / "gpualert_slurm" / "__init__.py").read_text())
    assert m
    return m.group(1)


@pytest.fixture(scope="module", params=["bookworm", "trixie"])
def deb(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(suite, the .deb): Debian 12's from `make deb` here (this machine is Debian 12);
    Debian 13's built the same way (scripts/make-deb.sh) in a Debian 13 container, against
    its Slurm 24.11, with this venv's NVML binding to bundle."""
    suite = request.param
    t0 = time.monotonic()
    name = f"gpualert-slurm_{_version()}_amd64.deb"
    if suite == "bookworm":
        p = subprocess.run(["make", "-s", "deb"], cwd=REPO, capture_output=True, text=True,
                           timeout=1200, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, f"make deb failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        path = REPO / "dist" / name
    else:
        import pynvml

        out = REPO / "build" / f"deb-{suite}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        shutil.copy(pynvml.__file__, out / "pynvml.py")
        parts = "pyproject.toml setup.cfg README.md gpualert_slurm spank epilog.d etc ood " \
            "debian docs scripts"
        cmd = (f"set -e; mkdir /tmp/s; cd /src; cp -a {parts} /tmp/s/; cd /tmp/s; "
               "GPUALERT_PYNVML=/out/pynvml.py GPUALERT_DEB_DIST=/out scripts/make-deb.sh")
        p = subprocess.run(["docker", "run", "--rm", "--network", "host", "-v",
                            f"{REPO}:/src:ro", "-v", f"{out}:/out", _builder(suite), "bash",
                            "-c", cmd], capture_output=True, text=True, timeout=1200,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 0, f"make-deb in {suite}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        path = out / name
    assert path.is_file()
    print(f"deb for {suite}: {time.monotonic() - t0:.0f} s")
    return suite, path


@pytest.fixture(scope="module")
def node(deb: tuple[str, Path]) -> Iterator[tuple[str, str]]:
    suite, path = deb
    image = _image(suite)
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True, timeout=60)
    run = subprocess.run(["docker", "run", "-d", "--name", NAME, "--network", "host", "--init",
                          "-v", f"{path.parent}:/deb:ro", image, "sleep", "infinity"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    try:
        yield suite, path.name
    finally:
        subprocess.run(["docker", "rm", "-f", NAME], capture_output=True, timeout=120)


def test_deb_holds_every_module_and_data_file_of_the_package(deb: tuple[str, Path]) -> None:
    """Every file of gpualert_slurm/ in the tree the .deb is built from (modules and the data
    they read: classify/rules/*.yaml, data/templates/*.j2, classes, precedence, policy ...;
    not the READMEs) is in the package, where Debian's python3 imports it from: a data file
    that setup.cfg's package_data misses would be absent there while every checkout test
    passes. And the NVML binding is bundled."""
    suite, path = deb
    listing = subprocess.run(["dpkg-deb", "-c", str(path)], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    prefix = "./usr/lib/python3/dist-packages/"
    shipped = {ln.split()[-1].removeprefix(prefix) for ln in listing.splitlines()
               if ln.split()[-1].startswith(prefix)}
    tree = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                           "gpualert_slurm"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=True).stdout.split()
    want = {f for f in tree if not f.endswith(".md") and (REPO / f).is_file()}
    assert len(want) > 100 and any(f.endswith(".j2") for f in want), sorted(want)[:20]
    assert sorted(want - shipped) == [], f"not in the {suite} .deb"
    assert "gpualert_slurm/_vendor/pynvml.py" in shipped
    # Open OnDemand's app where OnDemand looks for system apps, and the Grafana dashboard
    paths = {ln.split()[-1] for ln in listing.splitlines()}
    assert {"./var/www/ood/apps/sys/gpualert/manifest.yml",
            "./var/www/ood/apps/sys/gpualert/passenger_wsgi.py",
            "./usr/share/gpualert/grafana/gpualert-dashboard.json"} <= paths


def test_deb_installs_runs_a_failing_job_to_a_mail_and_removes_cleanly(node, smtp_server):
    suite, deb_name = node
    t0 = time.monotonic()
    host = sh("hostname").stdout.strip()
    assert sh("ls /opt/gpualert /usr/lib/gpualert 2>&1; command -v gpualert",
              check=False).returncode != 0, "the node is not clean: gpualert is there already"
    # The site as it was before gpualert: munge and a working Slurm.
    sh("dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none && "
       "chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key && "
       "install -d -o munge -g munge -m 0755 /run/munge && runuser -u munge -- munged")
    write("/etc/slurm/slurm.conf", SLURM_CONF.format(host=host, ctld=CTLD_PORT, node=NODE_PORT))
    sh("install -d -m 0755 /var/spool/slurmctld /var/spool/slurmd")
    site_conf = sh("sha256sum /etc/slurm/slurm.conf").stdout

    # apt-get install ./…deb: the dependencies come from Debian's mirror.
    t_inst = time.monotonic()
    inst = sh(f"export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && "
              f"apt-get install -y -q /deb/{deb_name}", timeout=900)
    t_inst = time.monotonic() - t_inst
    assert "installed, not enabled" in inst.stdout
    assert sh("dpkg-query -W -f='${Status}' gpualert-slurm").stdout == "install ok installed"
    # Installed inactive: the plugstack line commented, slurm.conf untouched, nothing running.
    plug = sh("cat /etc/slurm/plugstack.conf.d/gpualert.conf").stdout
    assert re.search(r"^#optional /usr/lib/gpualert/gpualert.so ", plug, re.M), plug
    assert sh("sha256sum /etc/slurm/slurm.conf").stdout == site_conf
    assert "python3-jinja2" in sh("dpkg-query -W -f='${Depends}' gpualert-slurm").stdout
    assert ("24.11" if suite == "trixie" else "22.05") in sh(
        "dpkg-query -W -f='${Depends}' gpualert-slurm").stdout
    assert sh("test -f /lib/systemd/system/gpualert-metrics.timer").returncode == 0

    # Enabled as README.Debian says: config (step 2), plugstack (3), slurm.conf (4).
    write("/etc/gpualert/gpualert.yaml", json.dumps({
        "spool": "/var/spool/gpualert",
        "mail": {"relay": f"127.0.0.1:{smtp_server.port}", "from": "gpualert@deb.test",
                 "domain": "deb.test"}}))
    sh("sed -i 's|^#optional /usr/lib/gpualert/|optional /usr/lib/gpualert/|' "
       "/etc/slurm/plugstack.conf.d/gpualert.conf")
    sh(f"cat >> /etc/slurm/slurm.conf <<'EOF'\n{ENABLE_LINES}EOF")
    sh("slurmctld && slurmd -N dn1")
    wait(lambda: "idle" in sh("sinfo -h -n dn1 -o %T", check=False).stdout, 60, "dn1 idle")
    doctor = sh("gpualert doctor", check=False)
    assert "FAIL" not in doctor.stdout, doctor.stdout

    # A failing job with --gpualert, as the user: the report arrives in the sink.
    sh("install -d -o gpatest -g gpatest /tmp/work")
    write("/tmp/work/job.sh", "#!/bin/bash\n#SBATCH -o out.%j\npython3 -c \"raise "
          "FileNotFoundError(2, 'No such file or directory', '/data/shards/train-0001.bin')\"\n",
          "0755")
    job = sh("cd /tmp/work && runuser -u gpatest -- sbatch --parsable --gpualert "
             "job.sh").stdout.strip()
    assert job.isdigit(), job

    def report() -> email.message.EmailMessage | None:
        for p in smtp_server.messages():
            m = email.message_from_bytes(p.read_bytes(), policy=policy.default)
            if m["X-Gpualert-Job"] == job:
                return m
        return None

    m = wait(report, 150, f"job {job}'s report in the sink")
    assert m["X-Sink-Rcpt-To"] == "gpatest@deb.test"
    verdict = json.loads(sh(f"cat /var/spool/gpualert/{job}/verdict.json").stdout)["verdict"]
    assert verdict["class"] == "file_not_found"
    assert "file_not_found" in m["Subject"] or "train-0001.bin" in m.get_body(
        ("plain",)).get_content()
    assert sh(f"ls /var/spool/gpualert/{job}/tasks/").stdout.strip(), "no task log kept"

    # The package's metrics command (what gpualert-metrics.service runs) sees the failure.
    sh("gpualert metrics --output /var/lib/prometheus/node-exporter/gpualert.prom")
    prom = sh("cat /var/lib/prometheus/node-exporter/gpualert.prom").stdout
    assert 'gpualert_failed_jobs{class="file_not_found",partition="debug"} 1' in prom, prom

    # apt-get remove: no gpualert process left, slurm.conf as it was, Slurm still runs jobs.
    conf_before = sh("sha256sum /etc/slurm/slurm.conf").stdout
    wait(lambda: not gpualert_processes(cmd_only=True), 90,
         "the job epilog's worker to finish")
    # A gpualert process still running at remove time (the hang watcher, started by hand)
    # is stopped by prerm after its wait (shortened here from 30 s).
    sh("setsid gpualert watch --loop --interval 5 </dev/null >/tmp/watch.log 2>&1 &")
    wait(lambda: any("watch" in r["cmd"] for r in gpualert_processes(cmd_only=True)), 30,
         "gpualert watch running")
    rm = sh("export DEBIAN_FRONTEND=noninteractive GPUALERT_PRERM_WAIT=3; "
            "apt-get remove -y -q gpualert-slurm", timeout=300)
    assert "stopping gpualert processes still running" in rm.stdout, rm.stdout
    assert sh("dpkg-query -W -f='${Status}' gpualert-slurm").stdout.startswith("deinstall")
    # No process runs gpualert. slurmd, which loaded the plugin when the job ran, keeps the
    # deleted file mapped until it restarts (Slurm's process, not gpualert's; new steps find
    # the plugin gone, and the plugstack line is `optional`).
    left = gpualert_processes()
    assert [r for r in left if "gpualert" in r["cmd"]] == []
    for r in left:
        assert r["cmd"].startswith(("slurmd", "slurmctld")), left
        assert all(m.endswith("(deleted)") for m in r["maps"]), left
    assert sh("sha256sum /etc/slurm/slurm.conf").stdout == conf_before
    assert sh("test -e /usr/bin/gpualert || test -e /usr/lib/gpualert/gpualert.so",
              check=False).returncode != 0
    # The conffile shims stay and exit 0: a job still runs and the node is not drained.
    job2 = sh("cd /tmp/work && runuser -u gpatest -- sbatch --parsable --wrap 'echo ok'"
              ).stdout.strip()

    def done() -> str | None:
        st = sh(f"scontrol show job {job2} -o", check=False).stdout
        m2 = re.search(r"JobState=(\S+)", st)
        return m2.group(1) if m2 and m2.group(1) not in ("PENDING", "RUNNING",
                                                          "CONFIGURING", "COMPLETING") else None

    assert wait(done, 60, f"job {job2} after the remove") == "COMPLETED"
    state = sh("sinfo -h -n dn1 -o %T").stdout.strip()
    assert state == "idle", state
    slurm = sh("sinfo -V").stdout.strip()
    assert re.search(r" 24\.11\." if suite == "trixie" else r" 22\.05\.", slurm), slurm
    # purge: the conffiles go, and root's runtime state with them (/run/gpualert: the hooks'
    # queue, which held the job's environment); slurm.conf stays, with a note that it still
    # names gpualert.
    assert sh("test -d /run/gpualert", check=False).returncode == 0, "no hook queue was made"
    purge = sh("export DEBIAN_FRONTEND=noninteractive; apt-get purge -y -q gpualert-slurm",
               timeout=300)
    assert "/etc/slurm/slurm.conf still names gpualert" in purge.stdout, purge.stdout
    assert sh("test -e /run/gpualert || test -e /etc/slurm/gpualert-epilog-slurmctld || "
              "test -e /etc/gpualert/gpualert.yaml", check=False).returncode != 0
    assert sh("dpkg-query -W -f='${Status}' gpualert-slurm", check=False).stdout in (
        "", "unknown ok not-installed"), "still known to dpkg after purge"
    assert sh("sha256sum /etc/slurm/slurm.conf").stdout == conf_before
    print(f"deb test ({suite}, {slurm}): apt-get install {t_inst:.0f} s, whole test "
          f"{time.monotonic() - t0:.0f} s")
