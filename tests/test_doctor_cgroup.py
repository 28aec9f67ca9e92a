"""`gpualert doctor` names the node's cgroup layout and whether the tap's stall guarantee holds
there (core/cgroup_layout.py, commands/doctor.py check_cgroup). The layouts are read from
/proc/self/mounts texts as each kind of node shows them (this machine's own included); the
v2 container cluster's nodes run it for real (tests/test_tap_cgroup_v2.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpualert_slurm.commands import doctor
from gpualert_slurm.core import cgroup_layout

SYSFS = "sysfs /sys sysfs rw,nosuid 0 0\n"
V2 = SYSFS + "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec 0 0\n"
V1 = SYSFS + "tmpfs /sys/fs/cgroup tmpfs ro 0 0\n" + "".join(
    f"cgroup /sys/fs/cgroup/{c} cgroup rw,{c} 0 0\n" for c in ("cpuset", "memory", "freezer"))
HYBRID = V1 + "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
MIXED = V2 + "cgroup /sys/fs/cgroup/freezer cgroup rw,freezer 0 0\n"
# a container that remounted cgroup2 over docker's tmpfs of v1 hierarchies: the last wins
REMOUNTED = V1 + "none /sys/fs/cgroup cgroup2 rw 0 0\n"


@pytest.mark.parametrize(("mounts", "kind"), [
    (V2, "v2"), (V1, "v1"), (HYBRID, "hybrid"), (MIXED, "mixed"), (SYSFS, "none"),
    (REMOUNTED, "v2"),
])
def test_layouts(mounts: str, kind: str) -> None:
    assert cgroup_layout.layout(mounts) == kind


def test_this_machine() -> None:
    kind = cgroup_layout.layout(Path("/proc/self/mounts").read_text())
    unified = Path("/sys/fs/cgroup/unified/cgroup.procs").exists()
    want = ("v2" if Path("/sys/fs/cgroup/cgroup.procs").exists() else
            "hybrid" if unified else "v1" if Path("/sys/fs/cgroup/freezer").is_dir() else "none")
    assert kind == want


def conf(tmp_path: Path, proctrack: str, cgplugin: str | None, mounts: str) -> tuple[str, str]:
    (tmp_path / "slurm.conf").write_text(f"ClusterName=x\nProctrackType={proctrack}\n")
    if cgplugin is not None:
        (tmp_path / "cgroup.conf").write_text(f"CgroupPlugin={cgplugin}\nIgnoreSystemd=yes\n")
    (tmp_path / "mounts").write_text(mounts)
    return str(tmp_path / "slurm.conf"), str(tmp_path / "mounts")


@pytest.mark.parametrize(("mounts", "proctrack", "cgplugin", "line"), [
    (V2, "proctrack/cgroup", "cgroup/v2",
     "info cgroup layout v2: the tap's stall guarantee holds (the copier host moves into "
     "gpualert_copiers"),
    (HYBRID, "proctrack/cgroup", "cgroup/v1",
     "info cgroup layout hybrid: the tap's stall guarantee holds (the copier host runs with "
     "slurmstepd in the job's freezer cgroup"),
    (V2, "proctrack/pgid", None, "info cgroup layout v2: the tap's stall guarantee holds (no "
     "step cgroup"),
    (MIXED, "proctrack/cgroup", "cgroup/v2", "warn cgroup layout mixed: the tap's stall "
     "guarantee does not hold: copiers start in the tasks"),
    (V2, "proctrack/cgroup", "cgroup/v1", "warn cgroup layout v2: the tap's stall guarantee "
     "does not hold: cgroup.conf says CgroupPlugin=cgroup/v1 on a v2 node"),
])
def test_doctor_says_the_layout_and_the_guarantee(tmp_path: Path, mounts: str, proctrack: str,
                                                  cgplugin: str | None, line: str) -> None:
    slurm_conf, mounts_file = conf(tmp_path, proctrack, cgplugin, mounts)
    r = doctor.check_cgroup(slurm_conf, mounts_file)
    assert r.line().startswith(line), r.line()
    assert not r.failed   # a warning, never a failure: the jobs still run
