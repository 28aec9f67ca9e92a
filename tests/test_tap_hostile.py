"""A job directory the user turned hostile must not hurt slurmstepd, root's files or the node
(issue 11, point 2).

The job owns <spool>/<jobid>, so while it runs it can put a FIFO, a symlink to a root-owned
file, or a directory (or a plain file) where the plugin's root side will open something when
the task ends: `tap.log`, `tasks/`, the task's log, its exit record. Each attack runs in the
same job twice at once, with `--gpualert` and with `--gpualert=off` (the job dir is prepared
for both, so the script does the same thing in both). Asserted for each attack:
- the tapped job ends within a bound (the job itself takes about a second);
- it ends in the same sacct state and exit code, with the same `slurm-%j.out`, as without the
  tap;
- a root-owned canary file (and a root-owned canary directory) keeps its bytes, size and
  mtime, and the directory gains no entry;
- the job's node is not drained.
On a timeout the test opens every FIFO in the job dir from the other end, so a slurmstepd
stuck in open() wakes up and the shared cluster is not left with a hung job.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from clusterlib import ClusterFacts, make_workdir, write_user_file
from spank_jobs import (
    Canary,
    assert_nodes_not_drained,
    assert_same_outcome,
    job_dir,
    job_output_bytes,
    require_plugin,
    submit_pairs,
    wait_final_or_cancel,
)

pytestmark = pytest.mark.cluster

END_WITHIN = 90  # seconds for a job that runs about one: generous for a loaded 2-core machine

# $T is the tasks dir, $J the job dir; CANARY / CANARY_DIR are root's. Each attack replaces
# one path the plugin opens as root when the task ends. Attacks on tap.log also turn tasks/
# into a plain file, so that writing the exit record fails and the plugin writes tap.log.
MOVE_TASKS = 'mv "$T" "$J/tasks.moved" && '
MOVE_LOG = '{ mv "$T/batch.0.log" "$T/moved.log" 2>/dev/null; true; } && '
ATTACKS = {
    "tap.log-fifo": MOVE_TASKS + 'touch "$T" && mkfifo "$J/tap.log"',
    "tap.log-symlink": MOVE_TASKS + 'touch "$T" && ln -sfn "$CANARY" "$J/tap.log"',
    "tap.log-dir": MOVE_TASKS + 'touch "$T" && rm -f "$J/tap.log" && mkdir "$J/tap.log"',
    "tasks-fifo": MOVE_TASKS + 'mkfifo "$T"',
    "tasks-symlink-to-root-dir": MOVE_TASKS + 'ln -s "$CANARY_DIR" "$T"',
    "tasks-symlink-to-root-file": MOVE_TASKS + 'ln -s "$CANARY" "$T"',
    "tasks-file": MOVE_TASKS + 'touch "$T"',
    "log-fifo": MOVE_LOG + 'mkfifo "$T/batch.0.log"',
    "log-symlink": MOVE_LOG + 'ln -s "$CANARY" "$T/batch.0.log"',
    "log-dir": MOVE_LOG + 'mkdir "$T/batch.0.log"',
    "exit-fifo": 'mkfifo "$T/batch.0.exit"',
    "exit-symlink": 'ln -s "$CANARY" "$T/batch.0.exit"',
    "exit-dir": 'mkdir "$T/batch.0.exit"',
}

SCRIPT = """#!/bin/bash
J={spool}/$SLURM_JOB_ID
T=$J/tasks
CANARY={canary}
CANARY_DIR={canary_dir}
echo start
mkdir -p "$T"   # the tap made it; without the tap the script does
sleep 0.5
if {{ {attack}; }} 2>"attack-$SLURM_JOB_ID.err"; then echo attacked; else echo "attack failed"; fi
echo done
"""


@pytest.fixture(scope="module")
def c(cluster: ClusterFacts) -> ClusterFacts:
    return require_plugin(cluster)


def unblock_fifos(d: Path) -> None:
    """Open every FIFO under `d` from both ends without blocking, then close: a process asleep
    in open() on one of them (the bug under test) wakes up."""
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = os.path.join(root, name)
            with contextlib.suppress(OSError):
                if not stat.S_ISFIFO(os.lstat(p).st_mode):
                    continue
                fds = []
                for flags in (os.O_RDONLY, os.O_WRONLY):
                    with contextlib.suppress(OSError):
                        fds.append(os.open(p, flags | os.O_NONBLOCK))
                time.sleep(1)
                for fd in fds:
                    os.close(fd)


@dataclass
class Attacked:
    dir: Path
    jobs: dict[str, tuple[int, int]]          # attack -> (tapped, plain)
    canaries: dict[str, tuple[Canary, tuple[object, ...]]]  # attack -> (canary, as made)


@pytest.fixture(scope="module")
def attacked(c: ClusterFacts) -> Iterator[Attacked]:
    d = make_workdir(c, "taphostile")
    canaries_root = c.root / f"canaries-{uuid.uuid4().hex[:8]}"
    canaries_root.mkdir(mode=0o755)
    scripts, canaries = {}, {}
    for name, attack in ATTACKS.items():
        canary = Canary.make(canaries_root / name)
        canaries[name] = (canary, canary.snapshot())
        text = SCRIPT.format(spool=c.spool, canary=canary.file, canary_dir=canary.dir,
                             attack=attack)
        scripts[name] = (write_user_file(d / f"{name}.sh", text), ())
    submitted = submit_pairs(c, scripts)
    try:
        yield Attacked(d, submitted, canaries)
    finally:
        for tapped, plain in submitted.values():
            for job in (tapped, plain):
                if job_dir(c, job).is_dir():
                    unblock_fifos(job_dir(c, job))


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_hostile_job_dir_harms_nothing(c: ClusterFacts, attacked: Attacked,
                                       attack: str) -> None:
    d = attacked.dir
    tapped, plain = attacked.jobs[attack]
    canary, made = attacked.canaries[attack]
    try:
        finals = wait_final_or_cancel(c, (tapped, plain), END_WITHIN)
    except AssertionError:
        unblock_fifos(job_dir(c, tapped))  # free the stuck slurmstepd, then report
        raise
    out_p = job_output_bytes(d / f"slurm-{plain}.out")
    assert out_p == b"start\nattacked\ndone\n", (
        f"the attack did not run as planned: {out_p!r} "
        f"{(d / f'attack-{plain}.err').read_text(errors='replace')}")
    assert job_output_bytes(d / f"slurm-{tapped}.out") == out_p
    assert_same_outcome(tapped, plain)
    assert canary.snapshot() == made, "a root-owned file or directory was changed"
    assert canary.file.read_bytes() == canary.content
    assert_nodes_not_drained(finals[0].nodes)
