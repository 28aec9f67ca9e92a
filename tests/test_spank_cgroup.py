"""The plugin's cgroup detection (spank/cgroup.c), which decides whether the copier host is
started (spank/README.md, "cgroup v2"): the layout is read from the filesystem types under
/sys/fs/cgroup (statfs), and slurmstepd's place from /proc/<pid>/cgroup.

This machine's kernel runs the v1 hybrid layout, so v2 cannot run Slurm here; the detection is
checked against real mounts instead: a tmpfs, a real cgroup v1 freezer hierarchy and a real
cgroup2 filesystem, each mounted in a private mount namespace (`unshare -m`: nothing leaks
into the host's, whatever happens), and against /proc/<pid>/cgroup files in each layout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

DRIVER = r"""
#include <stdio.h>
#include <string.h>
#include "cgroup.h"
int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "mode")) {
        puts(gpa_cgroup_mode_name(gpa_cgroup_mode(argv[2])));
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "in-step")) {
        enum gpa_cgroup_mode m = GPA_CG_NONE;
        for (int i = 0; i <= GPA_CG_MIXED; i++)
            if (!strcmp(argv[3], gpa_cgroup_mode_name((enum gpa_cgroup_mode)i)))
                m = (enum gpa_cgroup_mode)i;
        printf("%d\n", gpa_stepd_in_step_cgroup(argv[2], m));
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "place")) {
        enum gpa_cgroup_mode m = GPA_CG_NONE;
        for (int i = 0; i <= GPA_CG_MIXED; i++)
            if (!strcmp(argv[3], gpa_cgroup_mode_name((enum gpa_cgroup_mode)i)))
                m = (enum gpa_cgroup_mode)i;
        char own[4096];
        enum gpa_copier_place p = gpa_copier_place(argv[2], m, own, sizeof(own));
        printf("%s %s\n", gpa_copier_place_name(p), own[0] ? own : "-");
        return 0;
    }
    return 2;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """spank/cgroup.c, built alone (it makes no Slurm call) with the plugin's own flags."""
    d = tmp_path_factory.mktemp("cgroup")
    (d / "driver.c").write_text(DRIVER)
    exe = d / "driver"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wformat=2",
                    "-I", str(REPO / "spank"), "-o", str(exe), str(d / "driver.c"),
                    str(REPO / "spank" / "cgroup.c")], check=True, capture_output=True,
                   text=True)
    return exe


def in_namespace(script: str) -> str:
    """Run a shell script as root in a private mount namespace; its stdout."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.fail("these tests mount filesystems: run as root, with unshare(1)")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-ec", script],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_layouts_are_told_apart_on_real_mounts(driver: Path, tmp_path: Path) -> None:
    root, v2, plain = tmp_path / "root", tmp_path / "v2", tmp_path / "plain"
    for d in (root, v2, plain / "freezer", plain / "unified"):
        d.mkdir(parents=True)
    out = in_namespace(f"""
        mount -t tmpfs none {root}
        echo "tmpfs=$({driver} mode {root})"
        mkdir {root}/freezer {root}/unified
        mount -t cgroup -o freezer cgroup {root}/freezer
        echo "tmpfs+freezer=$({driver} mode {root})"
        mount -t cgroup2 none {root}/unified
        echo "tmpfs+freezer+cgroup2=$({driver} mode {root})"
        mount -t cgroup2 none {v2}
        c=$(test -e {v2}/cgroup.controllers && echo yes)
        echo "cgroup2=$({driver} mode {v2}) controllers=$c"
        mkdir -p {v2}/gpatest-mixed-$$/freezer
        mount -t cgroup -o freezer cgroup {v2}/gpatest-mixed-$$/freezer
        echo "cgroup2+freezer=$({driver} mode {v2}/gpatest-mixed-$$)"
        umount {v2}/gpatest-mixed-$$/freezer
        rmdir {v2}/gpatest-mixed-$$/freezer {v2}/gpatest-mixed-$$
        echo "plain=$({driver} mode {plain})"
        echo "fstypes=$(stat -fc %T {root} {root}/freezer {root}/unified {v2} | tr '\\n' ' ')"
    """)
    seen = dict(line.split("=", 1) for line in out.splitlines())
    # the mounts are what they claim (a real cgroup2 filesystem, not a directory named so)
    assert seen.pop("fstypes").split() == ["tmpfs", "cgroupfs", "cgroup2fs", "cgroup2fs"], out
    assert seen == {"tmpfs": "none", "tmpfs+freezer": "v1", "tmpfs+freezer+cgroup2": "hybrid",
                    "cgroup2": "v2 controllers=yes",
                    # a v1 hierarchy inside a cgroup2 root: neither layout Slurm knows
                    "cgroup2+freezer": "mixed",
                    # names alone do not count: directories called freezer/unified are no cgroups
                    "plain": "none"}, out


def test_this_machine_is_reported_as_its_kernel_mounts_it(driver: Path) -> None:
    fstype = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True,
                            text=True, check=True).stdout.strip()
    unified = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup/unified"],
                             capture_output=True, text=True).stdout.strip()
    want = ("v2" if fstype == "cgroup2fs" else
            ("hybrid" if unified == "cgroup2fs" else "v1")
            if Path("/sys/fs/cgroup/freezer").is_dir() else "none")
    got = subprocess.run([str(driver), "mode", "/sys/fs/cgroup"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert got == want, (fstype, unified)


# slurmstepd's /proc/<pid>/cgroup in each layout. v1/hybrid: read on this machine's native
# cluster (proctrack/cgroup, cgroup/v1, Slurm 22.05.8) with `srun bash -c 'cat /proc/$PPID/cgroup;
# cat /proc/self/cgroup'`: slurmstepd in the job's freezer cgroup, the task in its step's. v2:
# where cgroup/v2 puts it (src/plugins/cgroup/v2/cgroup_v2.c, 22.05 to 25.05: the stepd scope,
# then job_X/step_Y/slurm_processes beside user_processes/task_N; new stepds wait in system).
STEPD_HYBRID = ("9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/slurm_n1/uid_1001/job_13\n"
                "5:devices:/\n4:memory:/slurm_n1/uid_1001/job_13/step_0\n3:cpuset:/\n"
                "2:cpuacct:/\n1:cpu:/\n0::/\n")
STEPD_V1 = STEPD_HYBRID.replace("0::/\n", "")
TASK_HYBRID = ("9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/slurm_n1/uid_1001/job_13/step_0\n"
               "5:devices:/\n4:memory:/slurm_n1/uid_1001/job_13/step_0/task_0\n3:cpuset:/\n"
               "2:cpuacct:/\n1:cpu:/\n0::/\n")
STEPD_V2 = "0::/system.slice/slurmstepd.scope/job_7/step_0/slurm_processes\n"
STEPD_V2_WAITING = "0::/system.slice/slurmstepd.scope/system\n"


@pytest.mark.parametrize(("text", "mode", "in_step"), [
    (STEPD_V1, "v1", 0),            # the job's freezer cgroup: the host is started
    (STEPD_HYBRID, "hybrid", 0),    # the unified line is systemd's, not Slurm's
    (STEPD_V2, "v2", 1),            # in the step's own cgroup: no host, tasks start copiers
    (STEPD_V2_WAITING, "v2", 0),
    (TASK_HYBRID, "hybrid", 1),
    (STEPD_V2, "none", 0),          # no cgroups mounted: no step cgroup to hold
    ("6:freezer,memory:/slurm/uid_1/job_7/step_0\n", "v1", 1),   # co-mounted controllers
    ("6:nofreezer:/x/step_0\n0::/\n", "v1", 0),                  # whole names only
])
def test_stepd_place_decides_the_host(driver: Path, tmp_path: Path, text: str, mode: str,
                                      in_step: int) -> None:
    f = tmp_path / "cgroup"
    f.write_text(text)
    out = subprocess.run([str(driver), "in-step", str(f), mode], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == str(in_step)


def test_unreadable_cgroup_file_means_no_host(driver: Path, tmp_path: Path) -> None:
    out = subprocess.run([str(driver), "in-step", str(tmp_path / "missing"), "v2"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "1"


STEPD_V2_ROOT_SCOPE = "0::/slurmstepd.scope/job_7/step_batch/slurm_processes\n"
STEPD_V2_NODE_SCOPE = "0::/system.slice/n1_slurmstepd.scope/job_7/step_0/slurm_processes\n"


@pytest.mark.parametrize(("text", "mode", "place"), [
    (STEPD_V1, "v1", "host -"),
    (STEPD_HYBRID, "hybrid", "host -"),
    (TASK_HYBRID, "hybrid", "task -"),
    (STEPD_V1, "none", "host -"),
    # v2: gpualert's own cgroup beside Slurm's scope, out of the job's subtree
    (STEPD_V2, "v2", "own-cgroup /system.slice/gpualert_copiers"),
    (STEPD_V2_NODE_SCOPE, "v2", "own-cgroup /system.slice/gpualert_copiers"),
    (STEPD_V2_ROOT_SCOPE, "v2", "own-cgroup /gpualert_copiers"),
    # not Slurm's shape, or a layout the plugin does not know: the safe path (no host)
    (STEPD_V2_WAITING, "v2", "unknown -"),
    ("0::/system.slice/slurmstepd.scope/job_7/step_0/user_processes/task_0\n", "v2",
     "unknown -"),
    (STEPD_V1, "v2", "unknown -"),
    (STEPD_V2, "mixed", "unknown -"),
])
def test_copier_place_by_layout(driver: Path, tmp_path: Path, text: str, mode: str,
                                place: str) -> None:
    f = tmp_path / "cgroup"
    f.write_text(text)
    out = subprocess.run([str(driver), "place", str(f), mode], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == place


def test_unreadable_cgroup_file_is_an_unknown_layout(driver: Path, tmp_path: Path) -> None:
    for mode in ("v1", "hybrid", "v2"):
        out = subprocess.run([str(driver), "place", str(tmp_path / "missing"), mode],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == "unknown -", mode


# what Slurm 24.11 really makes (seen in the cgroup v2 guest, tests/test_tap_cgroup_v2.py):
# job_X/step_Y/{slurm,user/task_N} under <node>_slurmstepd.scope
STEPD_V2_2411 = "0::/system.slice/n1_slurmstepd.scope/job_5/step_batch/slurm\n"
TASK_V2_2411 = "0::/system.slice/n1_slurmstepd.scope/job_5/step_0/user/task_0\n"


@pytest.mark.parametrize(("text", "place"), [
    (STEPD_V2_2411, "own-cgroup /system.slice/gpualert_copiers"),
    (TASK_V2_2411, "unknown -"),
])
def test_copier_place_slurm_2411_names(driver: Path, tmp_path: Path, text: str,
                                       place: str) -> None:
    f = tmp_path / "cgroup"
    f.write_text(text)
    out = subprocess.run([str(driver), "place", str(f), "v2"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == place


# Slurm 26.05 names the job's cgroup by its SLUID unless CgroupJobIdPaths=yes
# (src/plugins/cgroup/v2/cgroup_v2.c, cgroup_p_step_create; src/common/sluid.c, print_sluid:
# "s" and 13 Crockford base-32 digits), then step_Y/{slurm,user/task_N} as in 24.11
STEPD_V2_2605 = "0::/system.slice/n1_slurmstepd.scope/s0A1B2C3D4E5F6/step_batch/slurm\n"
TASK_V2_2605 = "0::/system.slice/n1_slurmstepd.scope/s0A1B2C3D4E5F6/step_0/user/task_0\n"


@pytest.mark.parametrize(("text", "place"), [
    (STEPD_V2_2605, "own-cgroup /system.slice/gpualert_copiers"),
    (STEPD_V2_2605.replace("/system.slice/n1_slurmstepd.scope", ""),
     "own-cgroup /gpualert_copiers"),
    (TASK_V2_2605, "unknown -"),
    # not a job's directory: a SLUID has no I, L, O or U and 13 digits; job_ takes digits only
    (STEPD_V2_2605.replace("s0A1B2C3D4E5F6", "s0I1B2C3D4E5F6"), "unknown -"),
    (STEPD_V2_2605.replace("s0A1B2C3D4E5F6", "s0A1B2C3D4E5F"), "unknown -"),
    (STEPD_V2_2605.replace("s0A1B2C3D4E5F6", "job_5x"), "unknown -"),
    (STEPD_V2_2605.replace("s0A1B2C3D4E5F6", "job_"), "unknown -"),
    (STEPD_V2_2605.replace("s0A1B2C3D4E5F6", "job_5/extra"), "unknown -"),
])
def test_copier_place_slurm_2605_sluid_names(driver: Path, tmp_path: Path, text: str,
                                             place: str) -> None:
    f = tmp_path / "cgroup"
    f.write_text(text)
    out = subprocess.run([str(driver), "place", str(f), "v2"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == place
