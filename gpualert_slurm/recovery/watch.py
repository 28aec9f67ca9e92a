"""`gpualert watch`: hang detection while jobs run, from the tap's heartbeats (each task log's
mtime moves with every write).

Who watches: one process on the controller (a systemd timer runs `gpualert watch`, or a
service runs `gpualert watch --loop --interval 15`), not a watcher per job: it never outlives a
job (it only looks at jobs squeue says are RUNNING), it costs nothing on the compute nodes
(an squeue and a few stat() of the shared spool per pass on the controller), and its crash or
hang touches no job (it only reads mtimes and the last lines of logs, as root).

Per running job that asked for hang= (or with the config's hang:), in its latest attempt:
- every rank silent for at least hang -> "hung": an alert mail while the job still runs (the
  last lines of each rank), then the recovery policy's decision for class `hang`
  (recovery.rules.hang: notify only by default; action mode may cancel or requeue it);
- one or more ranks silent for at least hang while another wrote within it -> "straggler":
  an alert naming those ranks.
Each alert is sent once per job attempt (state in <spool>/.gpualert/watch.json).
Each pass also finishes recovery decisions a crash interrupted (recovery.resume_unfinished).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from gpualert_slurm import slurm
from gpualert_slurm.config import Config, ConfigError, load_config
from gpualert_slurm.options import OptionError, parse_options
from gpualert_slurm.spool import attempt_dir, job_dir, latest_attempt

TAIL_BYTES = 4096


def _tail(path: str, n: int = 8) -> list[str]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES)).replace(b"\0", b"")
    finally:
        os.close(fd)
    lines = data.decode(errors="replace").splitlines()
    return [ln[:300] for ln in lines[-n:]]


def heartbeats(spool: str, job_id: str, start: float) -> tuple[int, dict[str, dict[str, Any]]]:
    """(attempt, '<step>.<rank>' -> {"silence_s", "file"}) for the latest attempt; a rank's
    log that was never written counts from the attempt's start."""
    jd = job_dir(spool, job_id)
    att = latest_attempt(jd)
    tasks = os.path.join(attempt_dir(jd, att), "tasks")
    out: dict[str, dict[str, Any]] = {}
    now = time.time()
    try:
        names = sorted(os.listdir(tasks))
    except OSError:
        return att, {}
    for name in names:
        if not name.endswith(".log"):
            continue
        path = os.path.join(tasks, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if os.path.exists(path[:-4] + ".exit"):
            continue  # that task has ended: silence is not a hang
        last = st.st_mtime if st.st_size else max(start, st.st_mtime)
        out[name[:-4]] = {"silence_s": now - last, "file": path}
    return att, out


def judge(beats: dict[str, dict[str, Any]], hang_s: float) -> tuple[str | None, list[str]]:
    """("hung", all ranks) | ("straggler", the silent ranks) | (None, [])."""
    if any(not k.startswith("batch.") for k in beats):
        # a batch script waiting on srun prints nothing: only the steps' ranks count
        beats = {k: b for k, b in beats.items() if not k.startswith("batch.")}
    if not beats:
        return None, []
    silent = [k for k, b in beats.items() if b["silence_s"] >= hang_s]
    if not silent:
        return None, []
    if len(silent) == len(beats):
        return "hung", silent
    return "straggler", silent


def _job_record(spool: str, job_id: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(job_dir(spool, job_id), "job.json"), encoding="utf-8") as f:
            rec = json.load(f)
        return rec if isinstance(rec, dict) else None
    except (OSError, ValueError):
        return None


def _alert(cfg: Config, rec: dict[str, Any], kind: str, ranks: list[str],
           beats: dict[str, dict[str, Any]], hang_s: float, attempt: int) -> str:
    from gpualert_slurm import notify
    from gpualert_slurm.report import build_message

    job_id = str(rec.get("job_id"))
    try:
        opts = parse_options(rec.get("options_raw"))
    except OptionError:
        opts = parse_options(None)
    who = ", ".join(f"rank {r}" for r in ranks)
    if kind == "hung":
        subject = f"[gpualert] HUNG job {job_id}: no output from any rank for {hang_s:g} s"
        head = (f"Job {job_id} (attempt {attempt}) is still running but none of its ranks has "
                f"written anything for at least {hang_s:g} s (hang={hang_s:g}s).")
    else:
        subject = f"[gpualert] STRAGGLER in job {job_id}: {who} silent for {hang_s:g} s"
        head = (f"Job {job_id} (attempt {attempt}) is running; {who} wrote nothing for at least "
                f"{hang_s:g} s while other ranks go on: the straggler is {who}.")
    parts = [head, ""]
    for k, b in sorted(beats.items()):
        parts.append(f"--- {k} (silent {b['silence_s']:.0f} s): {b['file']}")
        parts += [f"    {ln}" for ln in _tail(b["file"])]
    text = "\n".join(parts) + "\n"
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_USER": str(rec.get("user") or "")}
    rcpts = list(notify.resolve_recipients(opts, env, cfg))
    msg = build_message(subject, text, "<pre>" + _html(text) + "</pre>", sender=cfg.mail.sender,
                        recipients=rcpts, job_id=job_id)
    d = notify.submit(msg, cfg=cfg, job_id=job_id, timeout_s=cfg.notify.total_timeout_s)
    return f"{getattr(d, 'status', '?')}: {getattr(d, 'reason', None) or 'ok'}"


def _html(text: str) -> str:
    import html

    return html.escape(text)


def _state_path(cfg: Config) -> str:
    return os.path.join(cfg.spool, ".gpualert", "watch.json")


def _load_state(cfg: Config) -> dict[str, Any]:
    try:
        with open(_state_path(cfg), encoding="utf-8") as f:
            s = json.load(f)
        return s if isinstance(s, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_state(cfg: Config, state: dict[str, Any]) -> None:
    p = _state_path(cfg)
    os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
    tmp = p + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, p)


def scan(cfg: Config, log: Any = None) -> list[dict[str, Any]]:
    """One pass over the running jobs; returns the alerts sent in this pass."""
    from gpualert_slurm import recovery

    state = _load_state(cfg)
    sent: list[dict[str, Any]] = []
    running = [j for j in slurm.queue(timeout=10) if j.state == "RUNNING"]
    alive = {str(j.job_id) for j in running}
    for j in running:
        jid = str(j.job_id)
        rec = _job_record(cfg.spool, jid)
        if rec is None:
            continue  # not monitored
        hang = (rec.get("options") or {}).get("hang_s") or cfg.hang_s
        if not hang:
            continue
        start = float(rec.get("start_time") or time.time())
        att, beats = heartbeats(cfg.spool, jid, start)
        kind, ranks = judge(beats, float(hang))
        if kind is None:
            continue
        key = f"{jid}.{att}.{kind}" + ("" if kind == "hung" else "." + ",".join(ranks))
        if key in state:
            continue
        status = _alert(cfg, rec, kind, ranks, beats, float(hang), att)
        state[key] = time.time()
        alert = {"job": jid, "attempt": att, "kind": kind, "ranks": ranks, "mail": status}
        if kind == "hung":
            worst = max(beats.values(), key=lambda b: b["silence_s"])
            v = {"job_id": jid, "attempt": att, "failed": True, "decision_id": f"{jid}.{att}.hang",
                 "job": {"nodes": list(j.nodes), "partition": j.partition, "user": j.user,
                         "work_dir": rec.get("work_dir"), "end_time": time.time()},
                 "options": rec.get("options") or {},
                 "verdict": {"class": "hang", "domain": "unknown", "root_node": None,
                             "evidence": [{"file": worst["file"], "line": None, "text":
                                           f"no output from any rank for {hang} s"}]}}
            alert["recovery"] = recovery.on_verdict(cfg, v, log)
        sent.append(alert)
    # forget jobs that are gone
    state = {k: t for k, t in state.items() if k.split(".")[0] in alive}
    _save_state(cfg, state)
    return sent


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpualert watch", description=__doc__.splitlines()[0])
    ap.add_argument("--loop", action="store_true", help="keep scanning (a service)")
    ap.add_argument("--interval", type=float, default=15.0, help="seconds between passes")
    ap.add_argument("--config")
    a = ap.parse_args(argv)
    try:
        cfg = load_config(a.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    from gpualert_slurm.recovery import resume_unfinished

    while True:
        t0 = time.monotonic()
        try:
            for s in scan(cfg):
                print(json.dumps(s, default=str), flush=True)
            for r in resume_unfinished(cfg):
                print(json.dumps({"resumed": r}, default=str), flush=True)
        except slurm.SlurmError as e:  # Slurm busy or down: the next pass tries again
            print(f"gpualert watch: {e}", file=sys.stderr, flush=True)
        if not a.loop:
            return 0
        time.sleep(max(0.5, a.interval - (time.monotonic() - t0)))
