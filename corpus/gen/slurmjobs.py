"""The `slurm` kind of the set files: batch jobs on the real test cluster (docker/slurm-cluster).

A case's `script` is submitted as the test user with `sbatch --gpualert` (unless its `sbatch`
arguments name their own `--gpualert=...`) from its own work directory; the tap writes every
task's log into the spool (`<spool>/<jobid>/tasks/<step>.<rank>.log` + `.exit`), and those files
are the case. The end state, exit code and reason come from sacct. Fields:
  script, sbatch (arguments), want (the end state, or a list; absent: any), want_or_text (kept
  also when a task log holds this text), expect: root_first (+ root_stuck) for multi-rank jobs,
  root_rank, hang_threshold_s (silence = sacct's End minus the tasks' last output),
  cancel_after (seconds after every job of the phase runs; cancel_as: root for an admin),
  preempt: NODE (an exclusive `urgent` job on NODE once the phase's victims run),
  node_fail: NODE (the node's slurmd and the jobs' slurmstepd are killed, then slurmd is
  restarted as the cluster script does and the node resumed), phase (cases run phase by phase,
  in the order phases first appear).
A job that did not end as the case says is dropped and reported, never relabelled.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from corpus.gen import capture

CLUSTER = Path("/var/lib/gpualert-cluster")
SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "slurm-cluster" / "cluster"
ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def _env() -> dict:
    return dict(os.environ, SLURM_CONF=str(CLUSTER / "etc/slurm.conf"))


def sacct(jid: int) -> tuple[str, str, str]:
    out = subprocess.run(["sacct", "-X", "-P", "-n", "-o", "State,ExitCode,Reason", "-j",
                          str(jid)], env=_env(), capture_output=True, text=True).stdout
    line = out.strip().splitlines()[0] if out.strip() else ""
    s, ec, reason = (line.split("|") + ["", "", ""])[:3]
    return s, ec, reason


def _state(jid: int) -> str:
    sq = subprocess.run(["squeue", "-h", "-j", str(jid), "-o", "%T"], env=_env(),
                        capture_output=True, text=True).stdout.strip()
    return (sq or sacct(jid)[0]).split(" ")[0] if (sq or sacct(jid)[0]) else ""


def wait_state(jids: list[int], want: tuple[str, ...], bound: float) -> None:
    t0 = time.time()
    left = set(jids)
    while left and time.time() - t0 < bound:
        left = {j for j in left if _state(j) not in want}
        time.sleep(2)


def wait_ended(jids: list[int], bound: float) -> None:
    wait_state(jids, ENDED, bound)
    t0 = time.time()  # sacct can lag behind the end, and the exit records behind the epilog
    while time.time() - t0 < 30 and not all(sacct(j)[0].split(" ")[0] in ENDED for j in jids):
        time.sleep(2)
    time.sleep(3)


def submit(setname: str, c: dict, fill) -> int:
    wd = CLUSTER / "work" / f"{setname}-{c['id']}"
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    (wd / "job.sbatch").write_text(fill(c["script"], str(wd)))
    progs = Path(__file__).resolve().parent / "progs"
    for f in progs.glob("*.py"):
        shutil.copy(f, wd / f.name)
    for f in [wd, *wd.iterdir()]:
        shutil.chown(f, "gpatest", "gpatest")
    args = shlex.split(c.get("sbatch", ""))
    tap = [] if any(a.startswith("--gpualert") for a in args) else ["--gpualert"]
    out = subprocess.run(["runuser", "-u", "gpatest", "--", "sbatch", "--parsable", *tap,
                          "--no-requeue", "-J", c["id"], "-o", "slurm-%j.out", *args,
                          "job.sbatch"], cwd=wd, env=_env(), check=True, capture_output=True,
                         text=True).stdout
    return int(out.strip().split(";")[0])


def _end_time(jid: int) -> float | None:
    end = subprocess.run(["sacct", "-X", "-P", "-n", "-o", "End", "-j", str(jid)], env=_env(),
                         capture_output=True, text=True).stdout.strip()
    with contextlib.suppress(ValueError):
        return time.mktime(time.strptime(end.splitlines()[0], "%Y-%m-%dT%H:%M:%S"))
    return None


def collect(root: Path, setname: str, c: dict, jid: int, case_dir) -> dict | None:
    """Copy the job's task logs (+ exit records) from the spool into the case; label it."""
    time.sleep(2)  # let the epilog finish writing
    st, ec, reason = sacct(jid)
    state = st.split(" ")[0]
    spool = CLUSTER / "spool" / str(jid) / "tasks"
    logs = sorted(spool.rglob("*.log")) if spool.is_dir() else []
    wd = CLUSTER / "work" / f"{setname}-{c['id']}"
    note = ""
    if not logs and (wd / f"slurm-{jid}.out").exists():
        # The tap left nothing (a job that never started a task): keep Slurm's own output.
        logs, note = [wd / f"slurm-{jid}.out"], " (no tap log: slurm-%j.out kept as batch.0.log)"
    d = case_dir(root, c["id"])
    tasks, last_out = [], 0.0
    for lg in logs:
        name = lg.name if lg.suffix == ".log" else "batch.0.log"
        m = re.match(r"(.+)\.(\d+)\.log$", name)
        step, rank = m.group(1), int(m.group(2))
        shutil.copy2(lg, d / name)
        if step != "batch" or len(logs) == 1:
            # srun's and slurmstepd's lines land in the batch log when the job is killed; the
            # tasks' own silence is in the step logs
            last_out = max(last_out, lg.stat().st_mtime)
        ex = lg.with_suffix(".exit")
        rec = json.loads(ex.read_text()) if lg.suffix == ".log" and ex.exists() else {}
        if rec:
            shutil.copy2(ex, d / ex.name)
        tasks.append({"log": str((d / name).relative_to(root)), "rank": rank,
                      "node": rec.get("node"), "step": step, "exit_code": rec.get("exit_code"),
                      "signal": rec.get("signal"), "core_dumped": bool(rec.get("core_dumped")),
                      "end_time": rec.get("end_time")})
    want = c.get("want")
    want = [want] if isinstance(want, str) else want
    why = None
    if want and state not in want:
        text = "".join((d / Path(t["log"]).name).read_text(errors="replace") for t in tasks)
        if not (c.get("want_or_text") and c["want_or_text"] in text):
            why = f"job {jid} ended {st} {ec} {reason}, wanted {'/'.join(want)}"
    if not tasks:  # cancelled before its first task: Slurm's facts are the whole case
        shutil.rmtree(d, ignore_errors=True)
    if not why and c.get("expect") == "root_first":
        from corpus.gen.runner import _root_first
        why = _root_first(c, [t for t in tasks if t["step"] != "batch"])
    if why:
        print(f"DROP {c['id']}: {why}", file=sys.stderr)
        shutil.rmtree(d, ignore_errors=True)
        return None
    code, _, sig = ec.partition(":")
    silence = None
    if c.get("hang_threshold_s") is not None:
        silence = round((_end_time(jid) or time.time()) - last_out, 3)
    return capture.label(
        c["id"], c["class"], tasks, command=f"sbatch job {jid}: {c.get('shown') or c['id']}{note}",
        root_rank=c.get("root_rank"), exit_code=int(code) if code.isdigit() else None,
        signal_=int(sig) if sig.isdigit() and int(sig) else None,
        slurm_state=state or None, slurm_reason=None if reason in ("", "None") else reason,
        hang_threshold_s=c.get("hang_threshold_s"), silence_s=silence)


# ---------------------------------------------------------------- node failure

def _daemon_pid(name: str) -> int | None:
    out = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True,
                         timeout=60).stdout
    m = re.search(rf"daemon\.{re.escape(name)}=running pid=(\d+)", out)
    return int(m.group(1)) if m else None


def _kill_tree(pid: int) -> None:
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    for k in kids.split():
        _kill_tree(int(k))
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def kill_node(node: str, jids: list[int]) -> None:
    """What a node crash does here: its slurmd and the jobs' slurmstepd die, with their tasks."""
    pid = _daemon_pid(f"slurmd-{node}")
    if pid is None:
        raise RuntimeError(f"no pid for slurmd-{node} in `cluster status`")
    os.kill(pid, signal.SIGKILL)
    want = {f"[{j}." for j in jids}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("slurmstepd:") and any(w in cmd for w in want):
            _kill_tree(int(p.name))


def restart_node(node: str) -> None:
    log = CLUSTER / "log" / f"slurmd-{node}.start.log"
    with open(log, "ab") as f:
        subprocess.run(["slurmd", "-N", node], stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                       env=_env(), timeout=60)
    st = ""
    t0 = time.time()
    while time.time() - t0 < 60:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=_env(),
                       capture_output=True, timeout=30)
        st = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], env=_env(),
                            capture_output=True, text=True, timeout=30).stdout.strip()
        if st in ("idle", "mixed", "allocated"):
            return
        time.sleep(3)
    print(f"corpus: warning: node {node} is {st!r} after restart", file=sys.stderr)


# ---------------------------------------------------------------- a set's Slurm cases

def run_phase(root: Path, setname: str, cases: list[dict], fill, case_dir) -> list[dict]:
    jids = {c["id"]: submit(setname, c, fill) for c in cases}
    acted = [c for c in cases if c.get("preempt") or c.get("node_fail") or c.get("cancel_after")]
    if acted:
        wait_state([jids[c["id"]] for c in acted], ("RUNNING",), 60)
    pre = sorted({c["preempt"] for c in cases if c.get("preempt")})
    if pre:
        time.sleep(8)  # the victims write some output first
        for node in pre:
            subprocess.run(["runuser", "-u", "gpatest", "--", "sbatch", "-p", "urgent", "-w",
                            node, "--exclusive", "-o", "/dev/null", "--wrap", "sleep 5"],
                           cwd="/tmp", env=_env(), check=True, capture_output=True)
    failing = sorted({c["node_fail"] for c in cases if c.get("node_fail")})
    if failing:
        time.sleep(5)
        for node in failing:
            kill_node(node, [jids[c["id"]] for c in cases if c.get("node_fail") == node])
    t0 = time.time()
    for c in sorted((c for c in cases if c.get("cancel_after")), key=lambda c: c["cancel_after"]):
        time.sleep(max(0.0, t0 + c["cancel_after"] - time.time()))
        who = [] if c.get("cancel_as") == "root" else ["runuser", "-u", "gpatest", "--"]
        subprocess.run([*who, "scancel", str(jids[c["id"]])], env=_env(), check=True)
    wait_ended(list(jids.values()), 400)
    for node in failing:
        restart_node(node)
    return [lab for c in cases if (lab := collect(root, setname, c, jids[c["id"]], case_dir))]


def run(root: Path, setname: str, cases: list[dict], fill, case_dir) -> list[dict]:
    phases: dict[str, list[dict]] = {}
    for c in cases:
        phases.setdefault(str(c.get("phase", "")), []).append(c)
    out: list[dict] = []
    for name, batch in phases.items():
        t0 = time.time()
        got = run_phase(root, setname, batch, fill, case_dir)
        print(f"slurm phase {name or '-'}: {len(got)}/{len(batch)} cases in "
              f"{time.time() - t0:.0f}s", flush=True)
        out += got
    return out
