"""The tap's cluster suite under cgroup v2, really run (issue 33, section 2).

Slurm's cgroup/v2 refuses a kernel that boots hybrid, as this machine does: every process's
/proc/<pid>/cgroup lists the v1 hierarchies before the unified line, containers with a private
cgroup namespace included, and src/plugins/cgroup/v2/cgroup_v2.c (_get_proc_cg_path, 22.05 to
26.05) stops slurmd: "fatal: Hybrid mode is not supported. Mounted cgroups are: 9:name=systemd:/
8:pids:/ ... 0::/" (seen in `GPUALERT_DCLUSTER_CGROUP=v2 dcluster up`, the containers with
cgroup2 mounted at their /sys/fs/cgroup). So the v2 cell runs the native test cluster in a qemu
guest booted with cgroup_no_v1=all (docker/slurm-cluster/v2vm: Debian 13's kernel and Slurm
24.11, gpualert built for it): a unified-only node, Slurm's cgroup/v2 with IgnoreSystemd=yes,
proctrack/cgroup, task/cgroup, ConstrainRAMSpace=yes (the guest has its controllers), and the
tap's own tests run there unchanged:

- test_tap_host: each copier is in gpualert's own cgroup (gpualert_copiers, beside slurmstepd's
  scope), not the step's; as the user, in its own session;
- test_tap_stall: a job whose spool hangs (FUSE, SIGSTOP) ends when the same job without
  gpualert does, while the spool is still stalled (both times printed); output byte-identical;
  the gap in tap.log and the exit record once the spool is back;
- test_tap_cgroup_layout: a mixed layout is said once, copiers start in the tasks, jobs run as
  without gpualert; `gpualert doctor` says v2 and that the guarantee holds;
- test_tap_hostile, test_tap_requeue (scontrol requeue, and a node lost under a job: its slurmd
  killed, the job requeued), test_tap_signals (every route, proctrack/cgroup and
  proctrack/pgid), test_tap (100 MB byte identity, exit codes).

Each of those files is one test here, its id naming the Slurm version and the layout
(`[24.11-v2-test_tap_stall]`): it passes when every test of that file passed in the guest.
CI runs the first three files on 24.11; `make test-matrix` (GPUALERT_TEST_MATRIX=1) adds
test_tap_hostile and test_tap_cgroup_layout (see FILES), test_tap_signals and test_tap (29
signal pairs on each of two clusters, about 10 min a cluster under TCG, and 300 MB through the
tap: with CI's 58 minutes of other tests, past its 90) and Slurm 26.05 (Debian sid) as
`[26.05-v2-...]`.
"""

from __future__ import annotations

import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
V2VM = REPO / "docker" / "slurm-cluster" / "v2vm"

# the Slurm version of each cell -> its image's Debian release
CELLS = {"24.11": "trixie"}
if os.environ.get("GPUALERT_TEST_MATRIX"):
    CELLS["26.05"] = "sid"
CELL_IDS = [f"{v}-v2" for v in CELLS]
FILES: tuple[str, ...] = ("test_tap_host", "test_tap_stall", "test_tap_requeue")
if os.environ.get("GPUALERT_TEST_MATRIX"):  # beyond CI's 90 minutes under TCG (a guest each)
    # Under TCG these take past CI's 90 minutes. slurmstepd's "Timeout waiting for
    # .../step_batch/slurm/cgroup.events to become empty" there, seen in jobs without
    # gpualert too, is set aside where outputs are compared (spank_jobs.STEP_LEAF_SLOW).
    FILES += ("test_tap_hostile", "test_tap_cgroup_layout", "test_tap_signals", "test_tap")
GUEST_TIMEOUT = 3300

# (the guest has no NIC: Slurm's getaddrinfo(AI_ADDRCONFIG) wants an address besides lo's)
# Under TCG a burst of Prologs takes 25-36 s (26.05 guest, test_tap_hostile), past Slurm's
# BatchStartTimeout (10 s): slurmctld requeued the jobs, "missing from batch node".
# The signals' second cluster (proctrack/pgid), beside the first, had its submissions time out
# with MessageTimeout=10 ("Socket timed out on send/recv operation"): 60 s in the matrix.
SUITE = """set -e
export GPUALERT_CLUSTER_BATCH_START_TIMEOUT=120
""" + ("export GPUALERT_CLUSTER_MESSAGE_TIMEOUT=60\n" if "test_tap_signals" in FILES else "") + """\
modprobe dummy && ip link add gpa0 type dummy && ip addr add 192.0.2.1/24 dev gpa0 \
  && ip link set gpa0 up
docker/slurm-cluster/cluster up > /mnt/out/up.log 2>&1 || { tail -30 /mnt/out/up.log; exit 1; }
grep -E '^(cgroup|slurm_version|proctrack)=' /mnt/out/up.log
rc=0
scripts/run-pytest.sh -p no:cacheprovider -v -rA -s --junitxml=/mnt/out/junit.xml \\
  """ + " ".join(f"tests/{f}.py" for f in FILES) + """ || rc=$?
# Slurm's and the hooks' logs outlive the guest (its disk is a snapshot): a failure's why
cp -a /var/lib/gpualert-cluster/log /mnt/out/cluster-log 2>/dev/null || true
exit $rc
"""

pytestmark = [pytest.mark.cluster, pytest.mark.docker]

_runs: dict[str, tuple[Path, str]] = {}


def guest_run(version: str) -> tuple[Path, str]:
    """The suite in a fresh v2 guest of that Slurm version, once a session: (its output dir,
    its output). Fails - never skips - when the guest cannot run."""
    if version not in _runs:
        if os.geteuid() != 0:
            pytest.fail("the cgroup v2 guest needs root (docker, qemu)")
        # 12 GiB: the cluster's DefMemPerCPU is a share of the guest's memory, enforced here
        # (ConstrainRAMSpace); with 6 GiB the stall test's 48 MiB writer was OOM-killed
        env = {**os.environ, "GPUALERT_DCLUSTER_SUITE": CELLS[version],
               "GPUALERT_V2VM_TIMEOUT": str(GUEST_TIMEOUT), "GPUALERT_V2VM_MEM": "12288"}
        earlier = ""
        for _ in range(2):
            proc = subprocess.run([str(V2VM), "run", SUITE], capture_output=True, text=True,
                                  env=env, timeout=GUEST_TIMEOUT + 900, stdin=subprocess.DEVNULL)
            m = re.search(r"output kept in (\S+)\)", proc.stderr)
            if not m:
                pytest.fail(f"the v2 guest did not run:\n{earlier}{proc.stderr[-3000:]}",
                            pytrace=False)
            # A guest whose kernel ended before the suite did (v2vm says why, from its console)
            # is booted once more, fresh; what the first one said stays in the output.
            if "the guest ended before CMD did" not in proc.stderr or earlier:
                break
            earlier = f"first guest, ended early:\n{proc.stderr[-3000:]}\n\n"
        _runs[version] = (Path(m.group(1)), earlier + proc.stdout + proc.stderr)
    return _runs[version]


def results(out_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """junit.xml of the guest's run: test file -> [(test name, outcome)]."""
    junit = out_dir / "junit.xml"
    if not junit.is_file():
        return {}
    by_file: dict[str, list[tuple[str, str]]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = tag
        by_file.setdefault(case.get("classname", "").split(".")[-1], []).append(
            (case.get("name", ""), outcome))
    return by_file


@pytest.mark.parametrize("version", list(CELLS), ids=CELL_IDS)
def test_the_guest_is_unified_only_and_slurm_runs_cgroup_v2(version: str) -> None:
    out_dir, output = guest_run(version)
    if output.startswith("first guest, ended early"):
        print(output.split("\n\n", 1)[0])     # why it was booted twice
    guest = (out_dir / "guest.txt").read_text()
    assert "/sys/fs/cgroup: cgroup2fs" in guest, guest
    cg_lines = guest.split("/proc/self/cgroup: ", 1)[1].strip().splitlines()
    assert len(cg_lines) == 1 and cg_lines[0].startswith("0::"), guest  # no v1 hierarchy
    up = (out_dir / "up.log").read_text()
    assert "cgroup=v2" in up and f"slurm_version={version}" in up, up


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("version", list(CELLS), ids=CELL_IDS)
def test_tap_suite_under_v2(version: str, name: str) -> None:
    out_dir, output = guest_run(version)
    got = results(out_dir).get(name)
    assert got, f"no result of tests/{name}.py from the v2 guest:\n{output[-4000:]}"
    bad = [(t, o) for t, o in got if o != "passed"]
    print(f"[{version}-v2] tests/{name}.py: {len(got) - len(bad)} of {len(got)} passed")
    for line in output.splitlines():
        if line.startswith("cgroup v2: job "):        # test_tap_stall's figures
            print(line)
    assert not bad, (f"tests/{name}.py in the v2 guest: {bad} (the guest's Slurm and hook logs:"
                     f" {out_dir}/cluster-log)\n{output[-4000:]}")

