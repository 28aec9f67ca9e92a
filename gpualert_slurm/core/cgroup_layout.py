"""Which cgroup layout a node has, and whether the tap's guarantees hold there.

The plugin decides the same from statfs (spank/cgroup.c); here it is read from
/proc/self/mounts, so `gpualert doctor` needs no C. The layouts:

- ``v2``: cgroup2 mounted at /sys/fs/cgroup (unified only; RHEL 9, Debian 11+);
- ``v1``: a tmpfs of per-controller cgroup v1 mounts there;
- ``hybrid``: v1, with a cgroup2 at /sys/fs/cgroup/unified beside them (systemd's);
- ``mixed``: a cgroup2 root with a v1 hierarchy mounted inside it (neither plugin's layout);
- ``none``: no cgroup mounted there.

What the tap promises (spank/README.md, "cgroup v2"): a job ends as it would without
gpualert, whatever the spool does. That needs every copier outside the step's cgroup, which
Slurm waits for at the step's end: under v1/hybrid the copier host sits with slurmstepd in the
job's freezer cgroup; under v2 the host moves itself into gpualert's own cgroup beside
Slurm's scope; with no cgroups nothing is waited for. On a mixed layout the plugin starts
copiers in the tasks (the safe path): a spool that hangs can then hold a job's end.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT = "/sys/fs/cgroup"
V1_CONTROLLERS = ("freezer", "memory", "cpuset", "devices")
OWN_CGROUP = "gpualert_copiers"   # spank/cgroup.h, GPA_OWN_CGROUP


def layout(mounts: str, root: str = ROOT) -> str:
    """The layout at `root` from the text of /proc/self/mounts (the last mount of a path is
    the one seen)."""
    fstype: dict[str, str] = {}
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            path = parts[1].replace("\\040", " ")
            # a mount over a path hides what was mounted below it before
            for below in [p for p in fstype if p.startswith(path.rstrip("/") + "/")]:
                del fstype[below]
            fstype[path] = parts[2]
    top = fstype.get(root, "")
    v1 = any(fstype.get(f"{root}/{c}") == "cgroup" for c in V1_CONTROLLERS)
    if top == "cgroup2":
        return "mixed" if v1 else "v2"
    if not v1:
        return "none"
    return "hybrid" if fstype.get(f"{root}/unified") == "cgroup2" else "v1"


@dataclass(frozen=True)
class Guarantee:
    holds: bool
    why: str


def tap_guarantee(kind: str, proctrack: str, cgroup_plugin: str) -> Guarantee:
    """Whether a stalled spool can hold a job's end on a node of layout `kind`, with slurm.conf's
    ProctrackType and cgroup.conf's CgroupPlugin (either may be "")."""
    cg_proctrack = proctrack.endswith("/cgroup")
    if kind == "mixed":
        return Guarantee(False, "copiers start in the tasks (the plugin's safe path): a spool "
                         "that hangs holds the job's end until it answers")
    if kind == "none" or not cg_proctrack:
        return Guarantee(True, "no step cgroup: nothing of Slurm's waits for a copier")
    want = {"v2": "cgroup/v2", "v1": "cgroup/v1", "hybrid": "cgroup/v1"}[kind]
    if cgroup_plugin not in ("", "autodetect", want):
        return Guarantee(False, f"cgroup.conf says CgroupPlugin={cgroup_plugin} on a {kind} "
                         f"node: Slurm's step cgroups are not where the plugin looks")
    if kind == "v2":
        return Guarantee(True, f"the copier host moves into {OWN_CGROUP}, beside slurmstepd's "
                         "scope: the step's end, cgroup.kill and freeze do not reach it")
    return Guarantee(True, "the copier host runs with slurmstepd in the job's freezer cgroup, "
                     "outside the step's")
