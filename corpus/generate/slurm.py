"""Family `slurm`: failures that need the real Slurm test cluster (docker/slurm-cluster/cluster).

Jobs are submitted as the test user with --gpualert, so the tap writes every task's log into
the spool (<spool>/<jobid>/tasks/<step>.<rank>.log + .exit); those files are the case. The
final state, exit code and reason come from sacct. Time limits, preemption (a job in the
higher-tier `urgent` partition needs the memory a `debug` job holds), scancel, node failure
(the node's slurmd and the job's slurmstepd killed, then slurmd restarted the way the cluster
script does it), cgroup OOM kills, silent hangs ended by the time limit, and multi-rank gloo
runs launched by srun.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from common import CORPUS, PY, case_dir, label, prog

# CORPUS_SLURM_PARTS=hangs,cancels (say) redoes only those parts, and owns only their cases.
PART_PREFIX = {"time_limits": "slurm-timelimit-", "hangs": "slurm-hang-",
               "cancels": "slurm-cancel-", "host_ooms": "slurm-oom-",
               "distributed": "slurm-dist-", "preemptions": "slurm-preempt-",
               "node_failures": "slurm-nodefail", "misc": "slurm-misc-"}
PARTS = [p for p in os.environ.get("CORPUS_SLURM_PARTS", ",".join(PART_PREFIX)).split(",") if p]
PREFIXES = tuple(PART_PREFIX[p] for p in PARTS)
CLUSTER = Path(__file__).resolve().parents[2] / "docker" / "slurm-cluster" / "cluster"
FACTS: dict[str, str] = {}
ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def available() -> bool:
    """the test cluster is not up (`docker/slurm-cluster/cluster status`)"""
    try:
        out = subprocess.run([str(CLUSTER), "status"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    for line in out.stdout.splitlines():
        k, _, v = line.partition("=")
        FACTS[k.strip()] = v.strip()
    return out.returncode == 0 and "spool" in FACTS and "user" in FACTS


def _user() -> str:
    return FACTS.get("user", "gpatest")


def _workdir(case_id: str) -> Path:
    d = Path(FACTS.get("workdir", "/var/lib/gpualert-cluster/work")) / f"corpus-{case_id}"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    pw = pwd.getpwnam(_user())
    os.chown(d, pw.pw_uid, pw.pw_gid)
    return d


def submit(case_id: str, body: str, args: list[str]) -> tuple[str, Path]:
    """sbatch a script as the test user from its own work dir; returns (jobid, workdir)."""
    wd = _workdir(case_id)
    script = wd / "job.sh"
    script.write_text("#!/bin/bash\n" + body.strip() + "\n")
    os.chmod(script, 0o755)
    cmd = ["runuser", "-u", _user(), "--", "sbatch", "--parsable", "-J", case_id,
           "-o", str(wd / "slurm-%j.out"), *args, str(script)]
    out = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"sbatch for {case_id} failed: {out.stderr.strip()}")
    return out.stdout.strip().split(";")[0], wd


def sacct(jobid: str) -> tuple[str, str, str]:
    out = subprocess.run(["sacct", "-X", "-P", "-n", "-o", "State,ExitCode,Reason", "-j", jobid],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    if not out:
        return "", "", ""
    state, code, reason = (out.splitlines()[0].split("|") + ["", "", ""])[:3]
    return state, code, reason


def squeue_state(jobid: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", jobid, "-o", "%T"], capture_output=True,
                          text=True, timeout=30).stdout.strip()


def wait_state(jobids: list[str], want: tuple[str, ...], limit: float) -> None:
    """Wait (bounded) until every job is in one of `want` states (squeue or sacct)."""
    deadline = time.time() + limit
    left = set(jobids)
    while left and time.time() < deadline:
        for j in list(left):
            st = squeue_state(j) or sacct(j)[0]
            if st.split()[0] in want if st else False:
                left.discard(j)
        time.sleep(2)


def wait_ended(jobids: list[str], limit: float) -> None:
    wait_state(jobids, ENDED, limit)
    # sacct can lag behind the end by a moment, and the exit records by the epilog.
    deadline = time.time() + 30
    while time.time() < deadline and not all(sacct(j)[0].split()[0] in ENDED if sacct(j)[0]
                                             else False for j in jobids):
        time.sleep(2)
    time.sleep(3)


def collect(case_id: str, jobid: str, wd: Path, cls: str, command: str,
            root_rank: int | None = None, hang_threshold_s: float | None = None) -> dict:
    """Copy the job's task logs (+ exit records) from the spool into the case; label it."""
    import json
    d = case_dir(case_id)
    tasks_dir = Path(FACTS["spool"]) / jobid / "tasks"
    tasks = []
    logs = sorted(tasks_dir.glob("*.log")) if tasks_dir.is_dir() else []
    note = ""
    if not logs and (wd / f"slurm-{jobid}.out").exists():
        # The tap left nothing (a job that never started a task): keep Slurm's own output.
        shutil.copy(wd / f"slurm-{jobid}.out", d / "batch.0.log")
        logs, note = [d / "batch.0.log"], " (no tap log: slurm-%j.out kept as batch.0.log)"
    last_out = 0.0
    for log in logs:
        m = re.match(r"(.+)\.(\d+)\.log$", log.name)
        step, rank = (m.group(1), int(m.group(2))) if m else ("batch", 0)
        if log.parent != d:
            shutil.copy2(log, d / log.name)
        if step != "batch" or len(logs) == 1:
            # The batch log of an srun job gets srun's/slurmstepd's lines when the job is
            # killed; the tasks' own silence is in the step logs.
            last_out = max(last_out, log.stat().st_mtime)
        ex = log.with_suffix(".exit")
        rec = json.loads(ex.read_text()) if ex.exists() else {}
        if ex.exists():
            shutil.copy2(ex, d / ex.name)
        tasks.append({"log": str((d / log.name).relative_to(CORPUS)), "rank": rank,
                      "node": rec.get("node"), "step": step, "exit_code": rec.get("exit_code"),
                      "signal": rec.get("signal"), "core_dumped": rec.get("core_dumped", False),
                      "end_time": rec.get("end_time")})
    state, code, reason = sacct(jobid)
    exit_code, _, sig = code.partition(":")
    silence = None
    if hang_threshold_s is not None:
        end = subprocess.run(["sacct", "-X", "-P", "-n", "-o", "End", "-j", jobid],
                             capture_output=True, text=True).stdout.strip()
        end_t = time.mktime(time.strptime(end, "%Y-%m-%dT%H:%M:%S")) if end else time.time()
        silence = round(end_t - last_out, 3)
    return label(case_id, cls, tasks, command=f"sbatch job {jobid}: {command}{note}",
                 root_rank=root_rank,
                 exit_code=int(exit_code) if exit_code.isdigit() else None,
                 signal_=int(sig) if sig.isdigit() and int(sig) else None,
                 slurm_state=state.split()[0] if state else None,
                 slurm_reason=reason if reason not in ("", "None") else None,
                 hang_threshold_s=hang_threshold_s,
                 silence_s=silence)


def long_body(i: int, case_id: str) -> str:
    """A job that keeps printing progress until something from outside ends it."""
    kinds = [
        " ".join(prog("pyfail", "long", i, case_id)),
        "srun " + " ".join(prog("pyfail", "long", i, case_id)),
        "for i in $(seq 1 100000); do echo \"epoch $((i/50)) batch $i loss 0.$RANDOM\"; "
        "sleep 0.$((RANDOM % 5 + 1)); done",
        f"echo \"host $(hostname) job $SLURM_JOB_ID\"; {PY} -u -c "
        "\"import time,random\nfor s in range(10**6):\n print(f'it {s} '"
        "f'loss={random.random():.4f}', flush=True); time.sleep(0.3)\"",
    ]
    return kinds[i % len(kinds)]


def plan_long(prefix: str, cls: str, n: int, args: list[str]) -> list[tuple]:
    return [(f"slurm-{prefix}-{i:02d}", cls, long_body(i, f"{prefix}{i}"), args)
            for i in range(n)]


def _run_batch(batch: list[tuple], limit: float, **collect_kw) -> list[dict]:
    jobs = []
    for case_id, cls, body, args in batch:
        try:
            jobid, wd = submit(case_id, body, args)
            jobs.append((case_id, cls, body, jobid, wd))
        except RuntimeError as e:
            print(f"corpus: {e}")
    wait_ended([j[3] for j in jobs], limit)
    return [collect(c, j, wd, cls, body.splitlines()[0][:200], **collect_kw)
            for c, cls, body, j, wd in jobs]


def time_limits() -> list[dict]:
    batch = plan_long("timelimit", "time_limit", 30, ["--time=1", "--gpualert"])
    return _run_batch(batch, limit=300)


def hangs() -> list[dict]:
    batch = []
    for i in range(6):
        case_id = f"slurm-hang-{i:02d}"
        cmd = " ".join(prog("pyfail", "hang", i, case_id))
        batch.append((case_id, "hang", cmd if i % 2 else f"srun {cmd}",
                      ["--time=1", "--gpualert=hang=20s"]))
    return _run_batch(batch, limit=300, hang_threshold_s=20.0)


def cancels() -> list[dict]:
    batch = plan_long("cancel", "cancelled", 30, ["--time=10", "--gpualert"])
    jobs = []
    for case_id, cls, body, args in batch:
        jobid, wd = submit(case_id, body, args)
        jobs.append((case_id, cls, body, jobid, wd))
    wait_state([j[3] for j in jobs], ("RUNNING",), 60)
    for n, (_, _, _, jobid, _) in enumerate(jobs):
        time.sleep(0.5 + (n % 5))  # cancelled at different points of their runs
        who = ["runuser", "-u", _user(), "--"] if n % 4 else []  # some by an admin (root)
        subprocess.run(who + ["scancel", jobid], timeout=30)
    wait_ended([j[3] for j in jobs], 120)
    return [collect(c, j, wd, cls, body.splitlines()[0][:200]) for c, cls, body, j, wd in jobs]


def preemptions() -> list[dict]:
    """Victims in `debug` hold most of a node's memory; an `urgent` job needing it preempts."""
    out = []
    nodes = FACTS.get("nodes", "n1,n2,n3").split(",")
    mem = _node_mem_mb()
    for rnd in range(5):
        batch = []
        for k, node in enumerate(nodes):
            for v in range(2):
                i = rnd * 6 + k * 2 + v
                case_id = f"slurm-preempt-{i:02d}"
                batch.append((case_id, "preempted", long_body(i, f"preempt{i}"),
                              ["-p", "debug", "-w", node, f"--mem={mem // 2 - 600}M",
                               "--time=10", "--gpualert"]))
        jobs = []
        for case_id, cls, body, args in batch:
            jobid, wd = submit(case_id, body, args)
            jobs.append((case_id, cls, body, jobid, wd))
        wait_state([j[3] for j in jobs], ("RUNNING",), 60)
        time.sleep(3 + rnd)
        urgent = []
        for node in nodes:
            jid, _ = submit(f"slurm-urgent-{rnd}-{node}", "sleep 2",
                            ["-p", "urgent", "-w", node, f"--mem={mem - 1200}M", "--time=2"])
            urgent.append(jid)
        wait_ended([j[3] for j in jobs], 120)
        wait_ended(urgent, 60)
        out += [collect(c, j, wd, cls, body.splitlines()[0][:200] + " (preempted by an urgent "
                        "job)") for c, cls, body, j, wd in jobs]
    return out


def _node_mem_mb() -> int:
    conf = Path(FACTS.get("conf", "/var/lib/gpualert-cluster/etc/slurm.conf")).read_text()
    m = re.search(r"RealMemory=(\d+)", conf)
    return int(m.group(1)) if m else 4096


def _kill_node(node: str, jobids: list[str]) -> None:
    """What a node crash does here: its slurmd and the jobs' slurmstepd die, with their tasks."""
    available()  # the cluster may have been restarted since: fresh pids
    m = re.search(r"pid=(\d+)", FACTS.get(f"daemon.slurmd-{node}", ""))
    if not m:
        raise RuntimeError(f"no pid for slurmd {node} in `cluster status`")
    os.kill(int(m.group(1)), signal.SIGKILL)
    want = {f"[{j}." for j in jobids}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("slurmstepd:") and any(w in cmd for w in want):
            _kill_tree(int(p.name))


def _kill_tree(pid: int) -> None:
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    with_children = [int(k) for k in kids.split()]
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    for k in with_children:
        _kill_tree(k)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _restart_node(node: str) -> None:
    log = Path(FACTS.get("logs", "/var/lib/gpualert-cluster/log"))
    with open(log / f"slurmd-{node}.start.log", "ab") as f:
        subprocess.run(["slurmd", "-N", node], stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                       timeout=60)
    deadline = time.time() + 60
    while time.time() < deadline:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"],
                       capture_output=True, timeout=30)
        st = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True,
                            text=True, timeout=30).stdout.strip()
        if st in ("idle", "mixed", "allocated"):
            return
        time.sleep(3)
    print(f"corpus: warning: node {node} is {st!r} after restart")


def node_failures() -> list[dict]:
    out = []
    for rnd, node in enumerate(("n3", "n2")):
        batch = plan_long(f"nodefail{rnd}", "node_failure", 15,
                          ["-w", node, "--no-requeue", "--time=10", "--gpualert"])
        jobs = []
        for case_id, cls, body, args in batch:
            jobid, wd = submit(case_id, body, args)
            jobs.append((case_id, cls, body, jobid, wd))
        wait_state([j[3] for j in jobs], ("RUNNING",), 60)
        time.sleep(5)
        _kill_node(node, [j[3] for j in jobs])
        wait_ended([j[3] for j in jobs], 120)
        _restart_node(node)
        out += [collect(c, j, wd, cls, body.splitlines()[0][:200] + f" (node {node} killed)")
                for c, cls, body, j, wd in jobs]
    return out


def host_ooms() -> list[dict]:
    allocs = [
        f"{PY} -c \"import sys\nb=[]\nfor i in range(100): b.append(bytearray(50<<20)); "
        "print(f'loaded block {i}', flush=True)\"",
        f"srun {PY} -c \"import numpy as np\nx=[np.ones((64,1<<20)) for _ in range(20)]\"",
        "echo start; python3 -c \"x = ' ' * (800 << 20); print(len(x))\"",
        " ".join(prog("pyfail", "long", 1, "oom")) + " &\n"
        f"{PY} -c \"import time\nb=bytearray(0)\nwhile True: b += bytearray(20<<20); "
        "time.sleep(0.05)\"\nrc=$?; kill %1; exit $rc",
    ]
    batch = []
    for i in range(12):
        body = allocs[i % len(allocs)]
        batch.append((f"slurm-oom-{i:02d}", "host_oom", body,
                      [f"--mem={[100, 150, 200][i % 3]}M", "--time=3", "--gpualert"]))
    labs = _run_batch(batch, limit=240)
    # Only what the cgroup OOM handler really killed counts as this class.
    return [lab for lab in labs if lab["slurm_state"] == "OUT_OF_MEMORY" or any(
        "oom-kill" in (CORPUS / t["log"]).read_text(errors="replace") for t in lab["tasks"])]


def distributed() -> list[dict]:
    modes = [("raise-value", "python_exception"), ("raise-key", "python_exception"),
             ("fnf", "file_not_found"), ("segv", "segfault"), ("stuck", "collective_timeout"),
             ("stuck", "collective_timeout"), ("nan", "nan_divergence"),
             ("ckpt", "checkpoint_corrupt"), ("ok", "success"), ("raise-shape",
                                                                 "python_exception")]
    batch = []
    for i, (mode, cls) in enumerate(modes):
        world = [2, 3, 4][i % 3]
        root = (i + 1) % world if mode != "ok" else None
        case_id = f"slurm-dist-{mode}-{i:02d}"
        port = 29500 + i * 7
        body = (f"export MASTER_ADDR=127.0.0.1 MASTER_PORT={port} OMP_NUM_THREADS=1\n"
                f"srun -K1 -n{world} bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS "
                f"exec {PY} {prog('distfail', mode, root if root is not None else -1, case_id)[1]}"
                f" {mode} {root if root is not None else -1} {case_id}'")
        batch.append((case_id, cls, body, [f"-n{world}", f"-N{min(world, 3)}", "--time=4",
                                           "--mem-per-cpu=1500M", "--gpualert"]))
    labs = []
    jobs = []
    for case_id, cls, body, args in batch:
        jobid, wd = submit(case_id, body, args)
        jobs.append((case_id, cls, body, jobid, wd))
    wait_ended([j[3] for j in jobs], 400)
    for (case_id, cls, body, jobid, wd), (mode, _) in zip(jobs, modes, strict=True):
        i = int(case_id.rsplit("-", 1)[1])
        world = [2, 3, 4][i % 3]
        root = (i + 1) % world if mode != "ok" else None
        labs.append(collect(case_id, jobid, wd, cls, body.splitlines()[1][:300],
                            root_rank=root))
    return [lab for lab in labs if plausible(lab)]


def plausible(lab: dict) -> bool:
    """The run went the way its label says (a busy machine can make an extra rank time out)."""
    tasks = {t["rank"]: t for t in lab["tasks"] if t["step"] != "batch"}
    root = lab["root_rank"]
    if lab["class"] == "success":
        return all(t["exit_code"] == 0 for t in tasks.values())
    if root is None:  # rendezvous: every started rank failed
        return all(t["exit_code"] != 0 for t in tasks.values())
    if root not in tasks:
        return False
    others = [t for r, t in tasks.items() if r != root]
    if lab["id"].startswith("dist-stuck-") or lab["id"].startswith("slurm-dist-stuck-"):
        return tasks[root]["signal"] is not None and all(t["exit_code"] == 1 for t in others)
    failed = [t for t in tasks.values() if t["exit_code"] != 0 and t["end_time"] is not None]
    return tasks[root]["exit_code"] != 0 and min(failed, key=lambda t: t["end_time"]) is \
        tasks[root]


def misc() -> list[dict]:
    """Workload failures through Slurm too: the batch log then also holds srun's lines."""
    kinds = [("python_exception", "python_exception"), ("file_not_found", "file_not_found"),
             ("import_error", "import_error"), ("segfault", "segfault"), ("success", "success"),
             ("unknown", "unknown"), ("host_oom", "host_oom")]
    batch = []
    for i in range(21):
        kind, cls = kinds[i % len(kinds)]
        case_id = f"slurm-misc-{kind}-{i:02d}"
        cmd = " ".join(prog("pyfail", kind, i, case_id, "/tmp"))
        if kind == "host_oom":
            cmd = f"ulimit -v 1500000; {cmd}"
        elif kind == "segfault" and i % 2:
            cmd = cmd.replace(f" {i} ", " 0 ")  # the ctypes NULL read, not the native helper
        body = cmd if i % 3 == 0 else (f"echo \"job $SLURM_JOB_ID on $(hostname)\"\n"
                                       f"srun {cmd}" if i % 3 == 1 else f"set -e\n{cmd}\n"
                                       "echo finished")
        batch.append((case_id, cls, body, ["--time=3", "--gpualert"]))
    return _run_batch(batch, limit=240)


def generate(workers: int = 2) -> list[dict]:
    out: list[dict] = []
    for part in (globals()[p] for p in PARTS):
        t0 = time.time()
        try:
            got = part()
        except Exception as exc:  # one part failing must not lose the others
            print(f"corpus: slurm {part.__name__} failed: {exc!r}")
            continue
        print(f"corpus: slurm {part.__name__}: {len(got)} cases in {time.time() - t0:.0f}s",
              flush=True)
        out += got
    return out
