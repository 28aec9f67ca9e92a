"""Signals must not change a job through the tap (issue 11, point 1).

Each case is one batch script submitted twice at once, with `--gpualert` and with
`--gpualert=off`; both must end in the same sacct state and exit code, write byte-identical
`slurm-%j.out` (and per-rank files), and the tapped job's spool logs must hold every byte
(`tasks/batch.0.log` = `slurm-%j.out`, `tasks/0.<rank>.log` = the rank's own output file).

Signals reach the job every way a job can get them: the job's own `kill 0` and
`kill -- -PGID` (a shell forwarding a checkpoint signal to its children), `scancel -s`
(to the batch shell with `--full`, or to the srun steps), and `--signal=[B:]SIG@N`. Each job
waits (bounded, silently) for its signal before printing a burst larger than a pipe buffer,
so a copier killed by the signal shows as lost output or SIGPIPE.

Every case runs under proctrack/cgroup (the shared test cluster) and proctrack/pgid (a second
native cluster beside it, clusterlib.PGID_CLUSTER_ENV: own root dir, name and ports). Under
cgroup, Slurm's own signals skip processes named slurmstepd (so a copier forked from
slurmstepd hides from `scancel`); under pgid they do not.

All pairs are submitted at once by one module fixture (jobs of a few seconds; the
`--signal=...@N` ones wait up to ~30 s for slurmctld's periodic time-limit check), and each
case is checked by its own test.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from clusterlib import (
    PGID_CLUSTER_ENV,
    ClusterError,
    ClusterFacts,
    cancel_quietly,
    cluster_up,
    make_workdir,
    using_conf,
    wait_until,
    write_user_file,
)
from spank_jobs import (
    assert_nodes_not_drained,
    assert_same_outcome,
    job_output_bytes,
    require_plugin,
    spool_bytes,
    submit_pair,
    task_files,
    wait_final_or_cancel,
)

from gpualert_slurm.core import slurm

pytestmark = pytest.mark.cluster

SIGNALS = ("USR1", "USR2", "ALRM", "HUP", "CONT", "STOP+CONT")

# Bash prelude of every job script and rank script. The traps only record; `wait_for` prints
# "got SIG" once the awaited signal came, so the output does not depend on when signals
# arrive (Slurm adds a SIGCONT to some signals, seen under proctrack/pgid). `nap` sleeps in bash
# itself (`read -t` on a pipe nobody writes), with no child to kill: a sleep child, even one
# that set `trap ''` at once, could be hit between its fork and that trap (a subshell resets
# the shell's traps), and bash then printed "User defined signal 1" in one run and not in the
# other (seen once, in the job without the tap, a rank signalling its own group). `wait_for`
# is bounded: a signal that never comes fails the job with exit 3, in both runs alike.
# `burst` prints 3000 lines (~130 KB, two pipe buffers) on stdout, then one on stderr after a
# pause (the tap carries the two streams in two pipes, so only a pause makes their order in
# the file certain).
PRELUDE = r"""#!/bin/bash
got=
on() { got="$got $1"; }
for s in USR1 USR2 ALRM HUP CONT; do trap "on $s" "$s"; done
exec {NAPFD}<> <(:)
# The substitution's child gone before any signal: on a loaded machine it may not have run yet,
# and a signal to the group then kills it ("User defined signal 1" from bash, at random).
wait $! 2>/dev/null || :
nap() { read -r -t "$1" -u "$NAPFD" _ || true; }
wait_for() {  # wait_for SIG [most seconds, 90 by default]
    local n=0
    until [[ "$got" == *" $1"* ]]; do
        nap 0.1; n=$((n + 1))
        if [ $n -ge $((${2:-90} * 10)) ]; then echo "no $1 within ${2:-90} s"; exit 3; fi
    done
    echo "got $1"
}
burst() {
    local i
    for ((i = 1; i <= 3000; i++)); do echo "$1 line $i of the output after the signal"; done
    nap 0.3
    echo "$1 on stderr" >&2
}
"""

# Sends CONT to the process group $1 every second until the file $2 exists (at most 60 s):
# started with setsid, so the STOP the script then sends to its own group misses it. The
# script waits until the helper is in its own session ($2.helper), else the STOP may catch
# it still in the script's group (seen: both stopped for good).
CONT_HELPER = r"""
cont_later() {
    # Its output is not the job's: killed in its sleep by the step's end, its bash would say
    # "Killed sleep 1" into slurm-%j.out, in one job of the pair and not the other.
    setsid bash -c 'touch "$2.helper"; for i in $(seq 60); do
        sleep 1; [ -e "$2" ] && exit; kill -CONT -- -"$1"; done' _ "$1" "$2" >/dev/null 2>&1 &
    local n=0
    until [ -e "$2.helper" ]; do nap 0.05; n=$((n + 1)); [ $n -lt 1200 ] || exit 3; done
}
"""


def send_to_own_group(sig: str, target: str) -> str:
    """Script lines by which the batch shell signals its own process group (`0` or -PGID)."""
    if sig == "STOP+CONT":
        return (f'cont_later "$(ps -o pgid= -p $$ | tr -d " ")" "resumed-$SLURM_JOB_ID"\n'
                f"kill -STOP {target}\nwait_for CONT\ntouch \"resumed-$SLURM_JOB_ID\"\n")
    return f"kill -{sig} {target}\nwait_for {sig}\n"


@dataclass(frozen=True)
class Case:
    id: str
    body: str                       # the batch script after PRELUDE
    sbatch: tuple[str, ...] = ()
    scancel: tuple[str, ...] = ()   # signals the test sends (in order, 1 s apart) once ready
    scancel_full: bool = True       # --full: the batch shell; else the job's srun steps
    ranks: int = 0                  # srun -n<ranks> tasks writing rank-%j-%t.out
    timeout: float = 240


def batch_case(sig: str, how: str) -> Case:
    """The batch shell receives `sig` by `how` (kill0, pgid, scancel), then bursts."""
    wait_sig = "CONT" if sig == "STOP+CONT" else sig
    if how == "kill0":
        send = send_to_own_group(sig, "0")
        return Case(f"{how}-{sig}", f"echo start\n{send}burst batch\n")
    if how == "pgid":
        send = send_to_own_group(sig, '-- -"$(ps -o pgid= -p $$ | tr -d " ")"')
        return Case(f"{how}-{sig}", f"echo start\n{send}burst batch\n")
    sigs = ("STOP", "CONT") if sig == "STOP+CONT" else (sig,)
    return Case(f"{how}-{sig}",
                f'echo start\ntouch "ready-$SLURM_JOB_ID"\nwait_for {wait_sig}\nburst batch\n',
                scancel=sigs)


# Each rank waits for the signal, then bursts into its own file (srun -o rank-%j-%t.out).
RANK_BURST = 'wait_for {sig}\nburst "rank $SLURM_PROCID"\n'
RANK_WAIT = (': > "ready-$SLURM_JOB_ID-$SLURM_PROCID"\n'
             'wait_for {sig} 170\nburst "rank $SLURM_PROCID"\n')
# Both ranks (on one node) set their traps before either signals its process group, which
# may hold the other rank too (whichever is untrapped then would die, at random). The ready
# files are made by a builtin (`: >`): a `touch` that had made its file but not yet exited was
# hit by the other rank's signal, and bash said "User defined signal 1" in one job of the pair.
RANK_SELF = (': > "ready-$SLURM_JOB_ID-$SLURM_PROCID"\n'
             'n=0; until [ -e "ready-$SLURM_JOB_ID-0" ] && [ -e "ready-$SLURM_JOB_ID-1" ]; do\n'
             '    nap 0.1; n=$((n + 1)); [ $n -lt 900 ] || exit 3; done\n'
             'kill -{sig} 0\n' + RANK_BURST)
SRUN = 'echo start\nsrun -n2 -o "rank-%j-%t.out" bash rank.sh\necho "srun exit $?"\n'

CASES: list[Case] = [
    # The batch script from the issue, verbatim in spirit: the handler echoes, the shell
    # forwards the checkpoint signal to its own process group at once. Four times: a copier
    # that leaves the group or blocks signals only some time after the task started is hit
    # in some runs, not all (seen: 2 runs of 4 with one pair each).
    *(Case(f"issue-trap-usr1-pgrp-{n}",
           "trap 'echo got usr1' USR1\necho before\nkill -USR1 -- -$$\necho after\n"
           "burst batch\n") for n in range(1, 5)),
    *(batch_case(sig, how) for how in ("kill0", "pgid", "scancel") for sig in SIGNALS),
    # --signal=B:SIG@N: the batch shell alone. slurmctld sends it at its first periodic check
    # (every 30 s) when less than N + 30 s remain: due at once (--time=2, @115), it came
    # before the script had set its trap and killed it (seen). The time counts from the
    # allocation, the Prolog and the launch come out of it: in the cgroup v2 guest (TCG) the
    # tapped job's Prolog ran 35 s in a burst of 26 and its batch shell started 65-68 s after
    # the allocation, so @70 (at 20-50 s) and @100 (at 50-80 s) came before its trap. --time=4,
    # @120: at 90-120 s.
    *(Case(f"sbatch-signal-B-{sig}",
           f'echo start\nwait_for {sig} 200\nburst batch\n',
           sbatch=("--time=4", f"--signal=B:{sig}@120"), timeout=330)
      for sig in ("USR1", "HUP")),
    # --signal=SIG@N: every srun step (not the batch shell). slurmctld sends it once, at its
    # first periodic check (every 30 s) when less than N + 30 s remain: with --time=3 and
    # @150 that was 9 s after the start, before srun had launched the step under load, and
    # the signal reached no task at all. --time=4 and @150 (at 60-90 s) was too early in the
    # cgroup v2 guest, where the tapped job's step started 89 s after the allocation (26.05,
    # after a slow Prolog). --time=6 and @210: at 120-150 s.
    *(Case(f"sbatch-signal-steps-{sig}", SRUN.replace("rank.sh", f"rank-wait-{sig}.sh"),
           sbatch=("-n2", "--time=6", f"--signal={sig}@210"), ranks=2, timeout=420)
      for sig in ("USR1", "USR2")),
    # scancel -s (no --full): the srun step's tasks.
    # (its 2-rank step took more than 120 s to be ready in the cgroup v2 guest)
    Case("scancel-steps-USR2", SRUN.replace("rank.sh", "rank-wait-USR2.sh"),
         sbatch=("-n2",), scancel=("USR2",), scancel_full=False, ranks=2, timeout=330),
    # A rank that signals its own process group (kill 0 inside an srun task).
    Case("rank-kill0-USR1", SRUN.replace("rank.sh", "rank-self-USR1.sh"),
         sbatch=("-N1", "-n2"), ranks=2),
    # Untrapped: the signal ends the batch shell; the job's end must still be the same.
    Case("untrapped-pgid-USR1",
         'trap - USR1\necho start\nkill -USR1 -- -$$\necho "not reached"\n'),
]

# GPUALERT_SIGNAL_CASES=REGEX runs only the cases whose id it finds (every route once, in the
# cgroup v2 guest, whose emulated CPUs take hours for all 52 pairs); unset: all of them.
if os.environ.get("GPUALERT_SIGNAL_CASES"):
    CASES = [case for case in CASES if re.search(os.environ["GPUALERT_SIGNAL_CASES"], case.id)]

RANK_SCRIPTS = {
    **{f"rank-wait-{s}.sh": PRELUDE + RANK_WAIT.format(sig=s) for s in ("USR1", "USR2")},
    "rank-self-USR1.sh": PRELUDE + RANK_SELF.format(sig="USR1"),
}


@dataclass
class Submitted:
    case: Case
    dir: Path
    jobs: tuple[int, int]           # (with --gpualert, with --gpualert=off)
    sender: threading.Thread | None = None
    sender_error: BaseException | None = None


def ready(d: Path, job: int, ranks: int) -> bool:
    names = [f"ready-{job}"] if not ranks else [f"ready-{job}-{r}" for r in range(ranks)]
    return all((d / n).exists() for n in names)


def send_signals(s: Submitted) -> None:
    """Once each job says it is ready (its traps are set), scancel it with the case's
    signals, 1 s apart. Readiness is bounded by the case's own timeout, less a minute for the
    signal and the output after it."""
    try:
        for job in s.jobs:
            wait_until(lambda j=job: ready(s.dir, j, s.case.ranks), s.case.timeout - 60,
                       f"job {job} ({s.case.id}) to be ready for its signal", interval=0.2)
        for i, sig in enumerate(s.case.scancel):
            if i:
                time.sleep(1)
            for job in s.jobs:
                full = ["--full"] if s.case.scancel_full else []
                slurm.run(["scancel", *full, "-s", sig, str(job)])
    except BaseException as e:  # reported by the case's test
        s.sender_error = e


# The proctrack plugins the cases run under: the shared test cluster (proctrack/cgroup, where
# Slurm's own signalling skips processes named slurmstepd) and a second native cluster with
# proctrack/pgid (clusterlib.PGID_CLUSTER_ENV), where it does not.
PROCTRACK = ("cgroup", "pgid")


@pytest.fixture(scope="module", params=PROCTRACK)
def c(cluster: ClusterFacts, request: pytest.FixtureRequest) -> Iterator[ClusterFacts]:
    if request.param == "cgroup":
        facts = cluster
    else:
        try:
            facts = cluster_up(env=PGID_CLUSTER_ENV)
        except ClusterError as e:
            pytest.fail(f"the proctrack/pgid test cluster is not available:\n{e}",
                        pytrace=False)
    assert facts.raw.get("proctrack") == request.param, (
        f"{facts.conf} runs proctrack/{facts.raw.get('proctrack')}, not {request.param}")
    with using_conf(facts):
        yield require_plugin(facts)


@pytest.fixture(scope="module")
def submitted(c: ClusterFacts) -> Iterator[dict[str, Submitted]]:
    d = make_workdir(c, "tapsignals")
    for name, text in RANK_SCRIPTS.items():
        write_user_file(d / name, text, 0o644)
    out: dict[str, Submitted] = {}

    def submit(case: Case) -> None:
        script = write_user_file(d / f"{case.id}.sh", PRELUDE + CONT_HELPER + case.body)
        out[case.id] = s = Submitted(case, d, submit_pair(c, script, case.sbatch))
        if case.scancel:
            s.sender = threading.Thread(target=send_signals, args=(s,), daemon=True)
            s.sender.start()

    try:
        with ThreadPoolExecutor(4) as pool:  # submitting 2 x 26 jobs one by one takes a minute
            list(pool.map(submit, CASES))
        yield out
    finally:
        # Harmless for ended jobs; never leaves one running in the shared queue.
        cancel_quietly(*(j for s in out.values() for j in s.jobs))


# slurmstepd's own complaint when the signal it sends (and the SIGCONT after it) finds the batch
# shell already gone: written into slurm-%j.out by slurmstepd, not by the job, with or without
# the tap (seen once in the job *without* it, pgid cluster, --signal=B:HUP). Only this race line
# is set aside; any other slurmstepd line still counts as a difference.
SIGNAL_RACE = re.compile(rb"^slurmstepd(?:-[\w.-]+)?: error: _handle_signal_container: "
                         rb"failed signal \d+ pid \d+ StepId=\S+ No such process\n", re.M)


def job_output(path: Path) -> bytes:
    return SIGNAL_RACE.sub(b"", job_output_bytes(path))


@pytest.mark.parametrize("case_id", [case.id for case in CASES])
def test_signal_leaves_job_unchanged(c: ClusterFacts, submitted: dict[str, Submitted],
                                     case_id: str) -> None:
    s = submitted[case_id]
    tapped, plain = s.jobs
    finals = wait_final_or_cancel(c, s.jobs, s.case.timeout)
    if s.sender:
        s.sender.join(s.case.timeout)
        assert not s.sender.is_alive(), "the signal sender did not finish"
        assert s.sender_error is None, f"sending the signal failed: {s.sender_error}"
    assert_same_outcome(tapped, plain)
    out_t = job_output(s.dir / f"slurm-{tapped}.out")
    out_p = job_output(s.dir / f"slurm-{plain}.out")
    assert b"batch line 3000" in out_p or s.case.ranks or case_id.startswith("untrapped"), (
        f"the job without the tap did not run to its end:\n{out_p[-400:]!r}")
    assert out_t == out_p, (f"slurm-%j.out differs with the tap ({len(out_t)} bytes) and "
                            f"without ({len(out_p)}); tail with: {out_t[-300:]!r}")
    assert spool_bytes(c, tapped, "batch.0.log") == out_t, (
        "tasks/batch.0.log is not exactly the batch step's output")
    for rank in range(s.case.ranks):
        rt = (s.dir / f"rank-{tapped}-{rank}.out").read_bytes()
        rp = (s.dir / f"rank-{plain}-{rank}.out").read_bytes()
        assert f"rank {rank} line 3000 ".encode() in rp, rp[-300:]
        assert rt == rp, f"rank {rank}'s output differs with the tap: {rt[-300:]!r}"
        assert spool_bytes(c, tapped, f"0.{rank}.log") == rt, (
            f"tasks/0.{rank}.log is not exactly rank {rank}'s output")
    assert task_files(c, plain) == {}
    assert_nodes_not_drained(finals[0].nodes)
