"""Run one local case of a set for real and label it (the `run` kind of sets/*.yaml).

A case names what runs and the conditions that make it fail by itself:
  cmd (str, split like a shell) or argv (list); shell: bash|sh runs cmd through that shell
  ranks: N processes, each with {RANK} and a shared {PORT0} (also in env values); launched: the
    ranks that start (a rendezvous missing the others); teardown_rank: the stuck rank the
    launcher stops (SIGTERM) once the others have ended; launcher_grace: seconds the others get
    after the first failure before a torchrun-like SIGTERM; rank_rlimit_as {rank: bytes};
    node (the exit records' node); job_exit: worst (the label's exit code is the highest)
  server: stall|reset|partial|close|eof, a local endpoint at {PORT} (servers.py; server_body:
    the bytes a partial answer sends)
  setup: shell line(s) run as root in a fresh {TMP} first (tmp_mode: its octal mode; cwd: run the
    commands elsewhere); user: run as that user (chown_tmp:
    hand {TMP} to it, `rootonly*` excepted); tmpfs: size (true = 512K) mounted at
    {TMP}/<tmpfs_at>; rlimit_as (bytes) / rlimit_as_mb; env ("" unsets); clean_env; user_env
    (HOME and USER of the user); unbuffered (default true: PYTHONUNBUFFERED=1)
  timeout (a run that reaches it is dropped), kill_at + kill_signal, kill_after
    [seconds, signal, self|child], silence_kill (seconds without output), hang (a watchdog that
    stops the job hang+3 s after its last output; the label gets hang_threshold_s/silence_s)
  expect: fail|ok|signal|any|root_first (multi-rank: root_stuck or the root fails first)|<exit
    code>; expect_text (one, or a list: any); expect_signal;
  drop_exit (exit codes meaning the failure did not happen);
  transform (transforms.py)
Placeholders: {PY} {PROGS} {NATIVE} {TMP} {PORT} {PORT0} {RANK}. A run that does not fail as
the case says is dropped and reported, never relabelled.
"""

from __future__ import annotations

import os
import pwd
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpus.gen import capture, transforms
from corpus.gen.servers import Server

SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "INT": signal.SIGINT,
           "HUP": signal.SIGHUP, "USR1": signal.SIGUSR1}
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


def fill(text: str, subs: dict[str, str]) -> str:
    """Substitute {NAME} placeholders only (inline programs contain other braces)."""
    for k, v in subs.items():
        text = text.replace("{" + k + "}", v)
    return text


def shown(c: dict) -> str:
    """The label's command: what ran (as the case wrote it), with the setup that made it fail."""
    if c.get("shown"):
        return c["shown"]
    text = c["cmd"] if "cmd" in c else " ".join(c["argv"])
    text = text.replace("{PY}", "python").replace("{PROGS}/", "progs/")
    setup = c.get("setup") or []
    setup = [setup] if isinstance(setup, str) else setup
    return text + (f"  (setup in {{TMP}}: {'; '.join(setup)})" if setup and c.get("show_setup")
                   else "")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _preexec(c: dict):
    limit = c.get("rlimit_as") or ((c["rlimit_as_mb"] << 20) if c.get("rlimit_as_mb") else None)
    user = c.get("user") if c.get("user_via", "setuid") == "setuid" else None

    def pre() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if user:
            pw = pwd.getpwnam(user)
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
    return pre


def _argv(c: dict, subs: dict[str, str]) -> list[str]:
    if "argv" in c:
        argv = [fill(a, subs) for a in c["argv"]]
    elif c.get("shell"):
        argv = [c["shell"], "-c", fill(c["cmd"], subs)]
    else:
        argv = shlex.split(fill(c["cmd"], subs))
    if c.get("user") and c.get("user_via") == "runuser":
        argv = ["runuser", "-u", c["user"], "--", *argv]
    return argv


def _env(c: dict, subs: dict[str, str], tmp: Path) -> dict[str, str]:
    if c.get("clean_env"):
        env = {"PATH": CLEAN_PATH, "HOME": str(tmp), "LANG": "C.UTF-8",
               "PYTHONPATH": subs["PROGS"], "PYTHONUNBUFFERED": "1"}
    else:
        env = dict(os.environ)
        env.pop("PYTHONFAULTHANDLER", None)
        if c.get("unbuffered", True):
            env["PYTHONUNBUFFERED"] = "1"
    if c.get("user") and c.get("user_env"):
        pw = pwd.getpwnam(c["user"])
        env.update(HOME=pw.pw_dir, USER=c["user"])
    env.update({k: fill(str(v), subs) for k, v in (c.get("env") or {}).items()})
    return {k: v for k, v in env.items() if v != ""}  # "" in a case's env unsets it


def _check(c: dict, tasks: list[dict], d: Path) -> str | None:
    codes = [t["exit_code"] for t in tasks]
    want = c.get("expect", "ok" if c["class"] == "success" else "fail")  # "any": no exit check
    job = tasks[0]
    if want == "ok" and any(x != 0 for x in codes):
        return f"meant to succeed, exit {codes}"
    if want == "fail" and all(x == 0 for x in codes):
        return "meant to fail, but every task exited 0"
    if want == "signal" and job["signal"] is None:
        return f"exit {job['exit_code']}, wanted a signal"
    if isinstance(want, int) and not isinstance(want, bool) and job["exit_code"] != want:
        return f"exit {job['exit_code']}, wanted {want}"
    text = "".join((d / Path(t["log"]).name).read_text(errors="replace") for t in tasks)
    want_text = c.get("expect_text")
    if isinstance(want_text, str):
        want_text = [want_text]
    if want_text and not any(w.lower() in text.lower() for w in want_text):
        return f"expected text {want_text!r} not in the log"
    sig = c.get("expect_signal")
    if sig and job["signal"] != sig and job["exit_code"] != 128 + sig:
        return f"expected signal {sig}, got {job['signal']}/{job['exit_code']}"
    return None


def _launcher(procs: list[capture.Running], grace: float, bound: float = 240) -> None:
    """Like torchrun: once a rank has failed, give the others `grace` seconds, then SIGTERM the
    survivors (SIGKILL 3 s later)."""
    t0, first_fail = time.time(), None
    while not all(p.poll() for p in procs):
        for p in procs:
            if p.poll() and p.status != 0 and first_fail is None:
                first_fail = time.time()
        if (first_fail is not None and time.time() > first_fail + grace) or \
                time.time() > t0 + bound:
            for p in procs:
                if not p.poll():
                    p.signal_group(signal.SIGTERM)
            time.sleep(3)
            for p in procs:
                if not p.poll():
                    p.signal_group(signal.SIGKILL)
        time.sleep(0.1)


def _root_first(c: dict, tasks: list[dict]) -> str | None:
    """A multi-rank run went the way its label says: the root rank failed first (a stuck root
    was stopped by the launcher while the others failed), a rendezvous failed on every rank."""
    by = {t["rank"]: t for t in tasks}
    root = c.get("root_rank")
    if c["class"] == "success":
        return None if all(t["exit_code"] == 0 for t in tasks) else "a rank failed"
    if root is None:
        return None if all(t["exit_code"] != 0 for t in tasks) else "a rank did not fail"
    others = [t for r, t in by.items() if r != root]
    if c.get("root_stuck"):
        ok = by[root]["signal"] is not None and all(t["exit_code"] == 1 for t in others)
        return None if ok else "the stuck rank was not the one stopped"
    failed = [t for t in tasks if t["exit_code"] != 0 and t["end_time"] is not None]
    ok = by[root]["exit_code"] != 0 and min(failed, key=lambda t: t["end_time"]) is by[root]
    return None if ok else "the root rank did not fail first"


def run_case(root: Path, c: dict, subs0: dict[str, str]) -> dict | None:
    """Run case `c` into root/cases/<id>/ and return its label, or None (dropped, reported)."""
    cid = c["id"]
    d = root / "cases" / cid
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"corpus-{cid}-"))
    os.chmod(tmp, int(str(c.get("tmp_mode", "755")), 8))
    subs = dict(subs0, TMP=str(tmp))
    mount = None
    server = None
    procs: list[capture.Running] = []
    stopped = None
    try:
        if c.get("tmpfs"):
            mount = tmp / c.get("tmpfs_at", "full")
            mount.mkdir()
            size = "512K" if c["tmpfs"] is True else c["tmpfs"]
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                           check=True)
            os.chmod(mount, 0o777 if c.get("user_via") != "runuser" else 0o755)
            if c.get("user"):
                shutil.chown(mount, c["user"], c["user"])
        if c.get("server"):
            server = Server(c["server"], body=c.get("server_body", 1024))
            subs["PORT"] = str(server.port)
        setup = c.get("setup") or []
        for line in [setup] if isinstance(setup, str) else setup:
            if subprocess.run(["bash", "-c", fill(line, subs)], cwd=tmp, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode:
                print(f"DROP {cid}: setup failed: {line}", file=sys.stderr)
                return None
        if c.get("user") and c.get("chown_tmp"):
            for p in [tmp, *tmp.iterdir()]:
                if not p.name.startswith("rootonly") and p != mount:
                    shutil.chown(p, c["user"], c["user"])
        subs["PORT0"] = str(free_port())
        cwd = fill(c["cwd"], subs) if c.get("cwd") else tmp
        for r in c.get("launched", range(c.get("ranks", 1))):
            rsubs = dict(subs, RANK=str(r))
            rc = dict(c, rlimit_as=(c.get("rank_rlimit_as") or {}).get(r, c.get("rlimit_as")))
            procs.append(capture.Running(_argv(c, rsubs), d / f"run.{r}.log", rank=r,
                                         node=c.get("node"), env=_env(c, rsubs, tmp), cwd=cwd,
                                         preexec=_preexec(rc)))
        t0 = time.time()
        main = procs[0]
        if "kill_after" in c:
            after, sig, target = c["kill_after"]
            time.sleep(after)
            if target == "child":  # kill the shell's child, as an outside OOM/killer would
                kids = subprocess.run(["pgrep", "-P", str(main.proc.pid)], capture_output=True,
                                      text=True).stdout.split()
                os.kill(int(kids[0]), sig)
            elif not main.poll():
                os.kill(main.proc.pid, sig)
        if c.get("hang"):
            while not main.poll() and time.time() - t0 < 120:
                if main.silent_for() > c["hang"] + 3:
                    os.kill(main.proc.pid, signal.SIGTERM)  # the watchdog ends the silent job
                    break
                time.sleep(0.2)
        if c.get("launcher_grace") is not None:
            _launcher(procs, c["launcher_grace"])
        stuck = c.get("teardown_rank")
        by_rank = {p.rank: p for p in procs}
        for r, p in by_rank.items():
            if r == stuck:
                continue
            p.wait(timeout=c.get("timeout", 180),
                   kill_signal=SIGNALS[c.get("kill_signal", "TERM")],
                   kill_at=c.get("kill_at"), silence_kill=c.get("silence_kill"))
            stopped = stopped or (p.stopped_by == "timeout")
        if stuck in by_rank:
            time.sleep(1)
            by_rank[stuck].signal_group(signal.SIGTERM)  # the launcher tears down what is left
            by_rank[stuck].wait(timeout=5, kill_signal=signal.SIGKILL)
    finally:
        for p in procs:
            if not p.poll():
                p.signal_group(signal.SIGKILL)
                p.wait(timeout=10)
        if server:
            server.close()
        if mount:
            subprocess.run(["umount", "-l", str(mount)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    if not procs:
        shutil.rmtree(d, ignore_errors=True)
        return None
    recs = [p.record() for p in procs]
    tasks = [capture.task_entry(root, d, rec) for rec in recs]
    failed = [t for t in tasks if t["exit_code"] != 0]
    # the job's status: that of the task that failed first (later ones were torn down), or with
    # job_exit: worst, the highest exit code (as a launcher that returns the worst one reports)
    job = min(failed, key=lambda t: t["end_time"]) if failed else tasks[0]
    if c.get("job_exit") == "worst" and failed:
        worst = max((t["exit_code"] or 0 for t in tasks), default=0)
        job = dict(job, exit_code=worst, signal=None if worst else job["signal"])
    silence = None
    if c.get("hang_threshold_s") is not None or c.get("hang"):
        silence = round(job["end_time"] - (d / "run.0.log").stat().st_mtime, 3)
    why = "ran into the build timeout" if stopped else _check(c, tasks, d)
    if not why and c.get("expect") == "root_first":
        why = _root_first(c, tasks)
    if not why and job["exit_code"] in c.get("drop_exit", ()):
        why = f"exit {job['exit_code']}: the failure did not happen"
    if why:
        print(f"DROP {cid}: {why}", file=sys.stderr)
        shutil.rmtree(d, ignore_errors=True)
        return None
    if c.get("transform"):
        for t in tasks:
            log = root / t["log"]
            log.write_bytes(transforms.apply(c["transform"], log.read_bytes(), cid,
                                             transforms.case_rank(tasks, log.name)))
    hang_t = c.get("hang_threshold_s", float(c["hang"]) if c.get("hang") else None)
    return capture.label(
        cid, c["class"], tasks, command=shown(c), root_rank=c.get("root_rank"),
        exit_code=job["exit_code"], signal_=job["signal"], hang_threshold_s=hang_t,
        silence_s=silence, transform=c.get("transform"), how=c.get("how"))
