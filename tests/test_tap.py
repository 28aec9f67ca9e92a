"""The task tap on the real cluster: every byte a task writes reaches both Slurm's destination
and the task's log in the spool, unchanged, on every run."""

from __future__ import annotations

import hashlib
import os
import pwd
import random
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from clusterlib import (
    ClusterFacts,
    diagnostics,
    make_workdir,
    sbatch,
    wait_final,
    wait_until,
    write_user_file,
)
from spank_jobs import job_dir, make_job_dir, require_plugin, steps, submit_held, task_files

from gpualert_slurm.core import slurm

pytestmark = pytest.mark.cluster

NODES, TASKS = 3, 6
TOTAL_BYTES = 100 * 1000 * 1000  # across all ranks

# Writes `size` pseudo-random bytes (seeded) to stdout in chunks of varying size, starting
# with NUL and invalid UTF-8, no trailing newline. The test regenerates the same bytes.
GEN = """\
import os, random, sys
seed, size = int(sys.argv[1]), int(sys.argv[2])
data = b"\\x00\\xff\\xfe\\xc3(" + random.Random(seed).randbytes(size - 5)
sizes = random.Random(-seed)
pos = 0
while pos < len(data):
    n = sizes.choice((1, 7, 4096, 65536, 65537, 300000))
    view = memoryview(data)[pos:pos + n]
    while view:
        view = view[os.write(1, view):]
    pos += n
"""


def expected(seed: int, size: int) -> bytes:
    return b"\x00\xff\xfe\xc3(" + random.Random(seed).randbytes(size - 5)


@pytest.fixture(scope="module")
def c(cluster: ClusterFacts) -> ClusterFacts:
    return require_plugin(cluster)


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.mark.parametrize("run", [1, 2, 3])
def test_every_rank_log_holds_exactly_its_bytes_100mb(c: ClusterFacts, run: int) -> None:
    """3 nodes x 2 tasks, 100 MB of binary data in total; repeated to catch a drain race.

    Run 1 lets Slurm write each task's output to its own file (compared byte for byte); runs
    2 and 3 send it through srun into slurm-%j.out, so the batch step's copier carries 100 MB
    too and is still draining when the batch script ends (when the step is killed)."""
    d = make_workdir(c, f"tapbytes{run}")
    write_user_file(d / "gen.py", GEN, 0o644)
    size = TOTAL_BYTES // TASKS
    seed0 = 1000 * run
    gen = f"bash -c 'exec /usr/bin/python3 gen.py $(({seed0} + SLURM_PROCID)) {size}'"
    step = f"srun -o 'rank-%t.out' {gen}" if run == 1 else f"srun {gen}"
    script = write_user_file(d / "job.sh", f"""#!/bin/bash
#SBATCH -N{NODES} -n{TASKS} --ntasks-per-node=2 --gpualert
echo start
{step}
echo end
""")
    jobid = submit_held(c, script)
    wait_final(jobid, 600, c.root)
    files = task_files(c, jobid)
    for rank in range(TASKS):
        want = sha(expected(seed0 + rank, size))
        log = files.get(f"0.{rank}.log")
        assert log is not None, f"no log for rank {rank}: {sorted(files)}"
        assert len(log) == size, f"rank {rank}: log has {len(log)} bytes, wrote {size}"
        assert sha(log) == want, f"rank {rank}: log differs from what the rank wrote"
        if run == 1:
            out = (d / f"rank-{rank}.out").read_bytes()
            assert sha(out) == want, f"rank {rank}: Slurm's own output file was changed"
    out = (d / f"slurm-{jobid}.out").read_bytes()
    if run == 1:
        assert out == b"start\nend\n"
    else:  # the ranks' bytes interleave in srun's order: check the size and the ends
        assert len(out) == size * TASKS + 10 and out.startswith(b"start\n")
        assert out.endswith(b"end\n")
    tap_log = job_dir(c, jobid) / "tap.log"
    if len(out) <= BATCH_LOG_MAX:
        assert files["batch.0.log"] == out
        assert not tap_log.exists(), tap_log.read_text()
    else:  # srun forwarded more than the batch log keeps: its head, a note, its tail
        assert files["batch.0.log"] == capped_batch_log(out)
        lines = tap_log.read_text().splitlines()
        assert len(lines) == 1 and "batch log capped" in lines[0], lines


BATCH_LOG_MAX = 64 << 20   # the plugin's default batch_log_max
BATCH_TAIL = 4 << 20


def capped_batch_log(out: bytes) -> bytes:
    """What the batch step's log holds when the output passed batch_log_max (spank/README.md)."""
    tail = out[BATCH_LOG_MAX:][-BATCH_TAIL:]
    left_out = len(out) - BATCH_LOG_MAX - len(tail)
    note = (f"\n[gpualert: {left_out} bytes of the batch step's output are not in this log "
            f"(batch_log_max={BATCH_LOG_MAX}); its last {len(tail)} bytes follow]\n").encode()
    return out[:BATCH_LOG_MAX] + note + tail


# Deterministic output on both streams (a pause whenever the stream changes, so arrival order
# is the write order), binary bytes, srun-forwarded output from rank 0 only, a failing step.
SAME_OUT = r"""#!/bin/bash
#SBATCH -N3 -n3
printf 'batch line 1\n'
sleep 0.3
printf 'batch err 1\n' >&2
sleep 0.3
printf '\x00\xff binary \xfe no newline'
sleep 0.3
srun bash -c '[ $SLURM_PROCID = 0 ] && printf "rank0 \x01\x80 forwarded\n"; true'
sleep 0.3
srun -N1 -n1 bash -c 'echo to-stderr >&2; sleep 0.5; exit 7'
sleep 0.3
printf 'last line, no newline'
"""


def test_job_output_identical_with_and_without_tap(c: ClusterFacts) -> None:
    """slurm-%j.out is byte-identical with and without --gpualert; batch log = that output."""
    d = make_workdir(c, "sameout")
    script = write_user_file(d / "job.sh", SAME_OUT)
    with ThreadPoolExecutor(2) as ex:
        with_tap, without = ex.map(
            lambda a: submit_held(c, script, a), [["--gpualert"], ["--gpualert=off"]]
        )
        for j in (with_tap, without):
            wait_final(j, 120, c.root)
    out_with = (d / f"slurm-{with_tap}.out").read_bytes()
    out_without = (d / f"slurm-{without}.out").read_bytes()
    assert b"rank0 \x01\x80 forwarded\n" in out_without and b"to-stderr" in out_without
    assert out_with == out_without
    assert task_files(c, with_tap)["batch.0.log"] == out_with
    assert task_files(c, without) == {}


def test_stdout_and_stderr_kept_apart(c: ClusterFacts) -> None:
    """With -o and -e, each file gets only its stream; the log has both in arrival order."""
    d = make_workdir(c, "split")
    script = write_user_file(d / "job.sh", """#!/bin/bash
#SBATCH -o out.txt -e err.txt --gpualert
for i in 1 2 3; do printf "out $i\\n"; sleep 0.2; printf "err $i\\n" >&2; sleep 0.2; done
""")
    jobid = submit_held(c, script)
    wait_final(jobid, 300, c.root)
    assert (d / "out.txt").read_bytes() == b"out 1\nout 2\nout 3\n"
    assert (d / "err.txt").read_bytes() == b"err 1\nerr 2\nerr 3\n"
    assert task_files(c, jobid)["batch.0.log"] == (
        b"out 1\nerr 1\nout 2\nerr 2\nout 3\nerr 3\n"
    )


def test_heartbeat_is_log_mtime(c: ClusterFacts) -> None:
    """The log's mtime follows the task's last output (what hang detection reads)."""
    d = make_workdir(c, "heartbeat")
    script = write_user_file(d / "job.sh", """#!/bin/bash
#SBATCH --gpualert
echo first; sleep 4; echo second; date +%s.%N > stamp; sleep 3
""")
    jobid = submit_held(c, script)
    wait_final(jobid, 300, c.root)
    log = job_dir(c, jobid) / "tasks" / "batch.0.log"
    stamp = float((d / "stamp").read_text())
    assert log.read_bytes() == b"first\nsecond\n"
    # Last write was just before the stamp, and 3 s before the job ended.
    assert abs(log.stat().st_mtime - stamp) < 1.0


def test_log_disk_full_keeps_forwarding(c: ClusterFacts) -> None:
    """tasks/ on a 1 MiB filesystem: the log stops, Slurm's output stays complete, and the
    fact is recorded in tap.log."""
    d = make_workdir(c, "diskfull")
    write_user_file(d / "gen.py", GEN, 0o644)
    size = 3 * 1024 * 1024
    script = write_user_file(d / "job.sh", f"""#!/bin/bash
#SBATCH --gpualert -o out.bin
exec /usr/bin/python3 gen.py 7 {size}
""")
    jobid = sbatch(script, "--hold", user=c.user)
    tasks = make_job_dir(c, jobid) / "tasks"
    tasks.mkdir()
    uid = pwd.getpwnam(c.user).pw_uid
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=1m,uid={uid},gid={uid},mode=0700",
                    "gpualert-test-full", str(tasks)], check=True)
    try:
        slurm.release(jobid)
        wait_final(jobid, 300, c.root)
        log = (tasks / "batch.0.log").read_bytes()
    finally:
        # The copier outlives the step by design (it finishes its log after the step's end,
        # LINGER_MS at most): it may still hold the log for a moment after Slurm's final state.
        for _ in range(40):
            if subprocess.run(["umount", str(tasks)], capture_output=True).returncode == 0:
                break
            time.sleep(0.25)
        else:
            subprocess.run(["umount", str(tasks)], check=True)
    want = expected(7, size)
    assert sha((d / "out.bin").read_bytes()) == sha(want)
    assert 0 < len(log) < size and want.startswith(log)
    taplog = (job_dir(c, jobid) / "tap.log").read_text()
    assert "task log write failed" in taplog and "No space left on device" in taplog, taplog
    assert steps(jobid)[0][1:] == ("COMPLETED", "0:0")


def test_copier_holds_only_its_own_fds(c: ClusterFacts) -> None:
    """The copier keeps 9 fds (2 pipes, the 2 original outputs, log, job dir, pidfd, handoff
    socket, its writer's wake-up eventfd) and none of the task's other files (here: fd 7 the
    script opens, and its stdin). It runs as two threads of the step's copier host, whose fds
    0-2 are /dev/null and which holds nothing else of slurmstepd's."""
    d = make_workdir(c, "fds")
    script = write_user_file(d / "job.sh", """#!/bin/bash
#SBATCH --gpualert
exec 7>"$PWD/held-by-task"
pgrep -u "$USER" -x slurmstepd > copiers.tmp; mv copiers.tmp copiers.txt
sleep 6
""")
    jobid = submit_held(c, script)
    wait_until(lambda: (d / "copiers.txt").exists(), 60, f"job {jobid} to list its copiers",
               interval=0.2, diagnose=lambda: diagnostics(jobid, c.root))
    # The host never execs, so it stays non-dumpable: only root can list its fds.
    found = {}
    for pid in (d / "copiers.txt").read_text().split():
        try:
            fds = {f.name: os.readlink(f) for f in Path(f"/proc/{pid}/fd").iterdir()}
        except FileNotFoundError:
            continue
        if any(t.endswith(f"/{jobid}/tasks/batch.0.log") for t in fds.values()):
            found[pid] = fds
    wait_final(jobid, 300, c.root)
    assert len(found) == 1, found
    (fds,) = found.values()
    assert [fds.get(n) for n in ("0", "1", "2")] == ["/dev/null"] * 3, fds
    own = {n: t for n, t in fds.items() if n not in ("0", "1", "2")}
    # 2 pipes in, the 2 original destinations, the task's pidfd, the handoff socket, the
    # writer's eventfd, the job dir and the task log (both opened by the writer thread).
    assert len(own) == 9, fds
    assert "anon_inode:[pidfd]" in own.values(), fds
    assert "anon_inode:[eventfd]" in own.values(), fds
    assert sum(t.startswith("socket:") for t in own.values()) == 1, fds
    assert sum(t.startswith("pipe:") for t in own.values()) >= 2, fds  # the task's pipes
    assert not any("held-by-task" in t for t in fds.values()), fds
