"""A hung spool must not slow, stop or fail the job, nor the node (issue 11, point 3).

The job's spool dir is a FUSE passthrough (tests/fuse_stall.py) that the test stalls with
SIGSTOP, the way a hung NFS/Lustre mount stalls every request. The plugin's spool comes from
plugstack.conf and is shared by the whole cluster, so only this one job's dir is put on the
FUSE mount: the job is submitted held, the test mounts the FUSE fs (backing dir owned by the
job's user, 0700, as the Prolog makes it) at <spool>/<jobid>, then releases the job; the
Prolog and the tap then find the job dir there.

The job prints a line, waits until the test has stalled the spool, then writes 48 MiB (more
than the tap's default 32 MiB spool buffer) and ends. Asserted:
- the job ends COMPLETED 0:0 while the spool is still stalled (the stall is lifted after
  STALL_MAX whatever happened: longer, a process stuck on the mount in the step would make
  Slurm drain the shared node). The copier whose write is stuck on the mount was started by the
  copier host, outside the step's cgroup (spank/host.c), so the step does not wait for it;
- its slurm-%j.out is complete and byte-identical to the same job's without the tap;
- the node is not drained;
- after the spool is resumed: tap.log names the gap (size and offsets), the exit record (kept on
  the node while the spool hung, moved in by the Epilog's background restorer once it answers)
  counts it, and the log is the output less exactly the gap's bytes: the copier outlived the
  step and wrote what it had queued.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterlib import (
    REPO,
    ClusterFacts,
    chown_to_user,
    diagnostics,
    make_workdir,
    sbatch,
    wait_final,
    wait_until,
    write_user_file,
)
from spank_jobs import (
    assert_nodes_not_drained,
    job_dir,
    node_health,
    require_plugin,
    submit_held,
)

from gpualert_slurm.core import slurm

pytestmark = pytest.mark.cluster

PYTHON = "/opt/gpualert/venv/bin/python"
SIZE = 48 * 1024 * 1024  # more than the tap's 32 MiB buffer: a gap must appear
STALL_MAX = 30    # the job writes 48 MiB (~2 s at Slurm's speed here) after the stall
END_WITHIN = 120  # once resumed

GEN = """\
import os, random, sys
data = random.Random(int(sys.argv[1])).randbytes(int(sys.argv[2]))
view = memoryview(data)
while view:
    view = view[os.write(1, view[:65536]):]
"""

SCRIPT = f"""#!/bin/bash
echo start
touch "ready-$SLURM_JOB_ID"
n=0
until [ -e "stalled-$SLURM_JOB_ID" ]; do sleep 0.1; n=$((n + 1)); [ $n -lt 1800 ] || exit 3; done
/usr/bin/python3 gen.py 5 {SIZE}
echo
echo end
"""


def expected_output() -> bytes:
    return b"start\n" + random.Random(5).randbytes(SIZE) + b"\nend\n"


class StallableMount:
    """tests/fuse_stall.py over a backing dir, mounted at `mountpoint`; stall()/resume()."""

    def __init__(self, backing: Path, mountpoint: Path) -> None:
        self.backing, self.mountpoint = backing, mountpoint
        self.proc = subprocess.Popen(
            [PYTHON, str(REPO / "tests" / "fuse_stall.py"), str(backing), str(mountpoint)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: os.path.ismount(mountpoint) or self.proc.poll() is not None, 30,
                       f"the FUSE mount at {mountpoint}", interval=0.1)
        except AssertionError:
            self.close()
            raise
        if self.proc.poll() is not None:
            out = self.proc.stdout.read().decode(errors="replace") if self.proc.stdout else ""
            raise AssertionError(f"fuse_stall.py exited {self.proc.returncode}: {out}")

    def stall(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        self.resume()
        subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True, timeout=30)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def c(cluster: ClusterFacts) -> ClusterFacts:
    return require_plugin(cluster)


@pytest.fixture
def stalled_job_dir(c: ClusterFacts) -> Iterator[tuple[int, StallableMount, Path]]:
    """A held tapped job whose spool dir is a stallable FUSE mount; yields (job, mount, workdir)
    with the job released. Always resumes and unmounts, and cancels the job if it is left."""
    d = make_workdir(c, "tapstall")
    write_user_file(d / "gen.py", GEN, 0o644)
    script = write_user_file(d / "job.sh", SCRIPT)
    job = sbatch(script, "--hold", "--gpualert", user=c.user)
    mount = None
    try:
        backing = c.root / f"stall-backing-{uuid.uuid4().hex[:8]}" / str(job)
        backing.mkdir(parents=True)
        chown_to_user(backing, c.user)
        backing.chmod(0o700)
        mountpoint = job_dir(c, job)
        mountpoint.mkdir()
        mount = StallableMount(backing, mountpoint)
        slurm.release(job)
        yield job, mount, d
    finally:
        if mount:
            mount.resume()
        with contextlib.suppress(slurm.SlurmError):
            if not slurm.job_state(job).final:
                slurm.cancel(job)
        if mount:
            with contextlib.suppress(AssertionError):
                wait_final(job, 120, c.root)  # whatever still writes to the mount has ended
            mount.close()
        undrain_after(job)


def undrain_after(job: int) -> None:
    """If a failure of the plugin under test drained the job's node ("Kill task failed": a
    process stuck on the stalled mount), resume it: the cluster is shared. The test itself
    has failed on that already (assert_nodes_not_drained)."""
    with contextlib.suppress(slurm.SlurmError):
        nodes = slurm.job_state(job).nodes
        for node, (state, reason) in node_health(nodes).items():
            if "drain" in state and "Kill task failed" in reason:
                slurm.update_node(node, "resume")


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_stalled_spool_neither_slows_nor_fails_the_job(
        c: ClusterFacts, stalled_job_dir: tuple[int, StallableMount, Path]) -> None:
    job, mount, d = stalled_job_dir
    # The same job without the tap, for its state and output (its own, unstalled job dir).
    plain = submit_held(c, d / "job.sh", ["--gpualert=off"])
    try:
        for j in (job, plain):
            wait_until(lambda j=j: (d / f"ready-{j}").exists(), 120, f"job {j} to start",
                       diagnose=lambda j=j: diagnostics(j, c.root))
        log = mount.mountpoint / "tasks" / "batch.0.log"
        wait_until(lambda: log.is_file() and log.stat().st_size > 0, 60,
                   "the tap to log the job's first line on the FUSE spool")
        mount.stall()
        t0 = time.monotonic()
        try:
            for j in (job, plain):
                write_user_file(d / f"stalled-{j}", "", 0o644)
            # Bounded stall: a process stuck in I/O on the mount past KillWait (5 s) plus
            # Slurm's UnkillableStepTimeout (60 s) drains the shared node ("Kill task
            # failed"), so the spool is resumed after STALL_MAX whatever happened.
            # Both jobs' ends, timed from the stall: the tapped one must end when the plain
            # one does (printed: the figures under v1 and in the cgroup v2 guest).
            ends: dict[int, float] = {}
            while time.monotonic() < t0 + STALL_MAX and job not in ends:
                for j in (job, plain):
                    if j not in ends and slurm.job_state(j).final:
                        ends[j] = time.monotonic() - t0
                time.sleep(0.2)
            ended = job in ends
            took = ends.get(job, time.monotonic() - t0)
            with contextlib.suppress(AssertionError):
                wait_until(lambda: plain in ends or (slurm.job_state(plain).final and
                                                     ends.setdefault(plain, time.monotonic() - t0)),
                           10, f"job {plain} to end")
        finally:
            mount.resume()
        st = wait_final(job, END_WITHIN, c.root)
        st_plain = wait_final(plain, END_WITHIN, c.root)
    finally:
        with contextlib.suppress(slurm.SlurmError):
            slurm.cancel(plain)
    assert_nodes_not_drained(st.nodes)
    # Every check is reported at once: which of them fail tells the plugin's author the most.
    problems = []
    if not ended:
        problems.append(f"job {job} had not ended {STALL_MAX} s after its spool stalled (it "
                        f"wrote its {SIZE} bytes in a few seconds): the tap made it wait")
    out = (d / f"slurm-{job}.out").read_bytes()
    if sha(out) != sha(expected_output()) or out != (d / f"slurm-{plain}.out").read_bytes():
        problems.append(f"slurm-%j.out with a stalled spool ({len(out)} bytes) is not the "
                        f"job's output ({len(expected_output())} bytes)")
    if (st.state, str(st.exit_code)) != ("COMPLETED", "0:0"):
        problems.append(f"the job ended {st.state} {st.exit_code}, not COMPLETED 0:0")
    if (st_plain.state, str(st_plain.exit_code)) != ("COMPLETED", "0:0"):
        problems.append(f"the job without the tap ended {st_plain.state} {st_plain.exit_code}")
    problems += record_gap_problems(mount.mountpoint, job)
    problems += tap_log_gap_problems(mount.mountpoint)
    if ended and plain in ends and ends[job] > ends[plain] + 5:
        problems.append(f"job {job} ended {ends[job]:.1f} s after its spool stalled, the same "
                        f"job without gpualert {ends[plain]:.1f} s")
    print(f"cgroup {'v2' if Path('/sys/fs/cgroup/cgroup.controllers').exists() else 'v1'}: "
          f"job {job} (gpualert) ended {took:.1f} s after the spool stalled, job {plain} "
          f"(without) {ends.get(plain, float('nan')):.1f} s")
    assert not problems, "\n".join(problems)


GAP_LINE = re.compile(r"gap: (\d+) bytes not logged at log offset (\d+) \(output offset (\d+)\)")


def tap_log_gap_problems(jd: Path) -> list[str]:
    """tap.log names a gap (size, log offset, output offset)."""
    taplog = jd / "tap.log"

    def text() -> str:
        return taplog.read_text(errors="replace") if taplog.is_file() else ""

    with contextlib.suppress(AssertionError):  # the copier writes it once the spool is back
        wait_until(lambda: GAP_LINE.search(text()), 30, "a gap line in tap.log")
    found = text()
    if not GAP_LINE.findall(found):
        return [f"tap.log names no gap with its size and offsets:\n{found or '(no tap.log)'}"]
    return []


def record_gap_problems(jd: Path, job: int) -> list[str]:
    """After the spool is resumed (the node Epilog moves in the record slurmstepd kept on the
    node), the exit record counts the gaps, and the log is the output less that many bytes,
    the same as the output up to the first gap."""
    exit_path = jd / "tasks" / "batch.0.exit"
    with contextlib.suppress(AssertionError):
        wait_until(exit_path.is_file, 60, f"the exit record of job {job}")
    if not exit_path.is_file():
        return [f"no exit record {exit_path} after the spool was resumed"]
    rec = json.loads(exit_path.read_text())
    if not ((rec.get("log_gaps") or 0) >= 1 and (rec.get("log_gap_bytes") or 0) > 0):
        return [f"the exit record counts no gap: {rec}"]
    logged = (jd / "tasks" / "batch.0.log").read_bytes()
    want = expected_output()
    first = min(rec["log_first_gap"], len(logged))
    if logged[:first] != want[:first]:
        return [f"the log differs from the output before the first gap (offset {first})"]
    if rec["log_flushed"] not in (True, False):
        return [f"the exit record does not say whether the log was flushed: {rec}"]
    # Drained or not when the task ended, the copier outlives the step: once the spool is
    # back it writes all it had queued, so the log ends up the output less the gaps.
    log = jd / "tasks" / "batch.0.log"
    with contextlib.suppress(AssertionError):
        wait_until(lambda: log.stat().st_size + rec["log_gap_bytes"] >= len(want), 60,
                   "the copier to write what it had queued once the spool answered")
    logged = log.read_bytes()
    if len(logged) + rec["log_gap_bytes"] != len(want):
        return [f"log {len(logged)} bytes + gaps {rec['log_gap_bytes']} != output {len(want)} "
                f"(log_flushed {rec['log_flushed']})"]
    return []
