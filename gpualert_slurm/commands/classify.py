"""`gpualert classify`: classify the task logs of one job (exit 0 whenever a verdict is made)."""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import signal as _signal
import sys

from gpualert_slurm.classify import JobFacts, RuleError, TaskInput, classify, load_rules
from gpualert_slurm.core import spool
from gpualert_slurm.core.task_records import task_node

_STEP_RANK = re.compile(r"^(?P<step>[\w-]+)\.(?P<rank>\d+)\.log$")
_RANK = re.compile(r"^rank(?P<rank>\d+)\.log$")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit 2 with one clear line, as argparse does
        self.print_usage(sys.stderr)
        print(f"gpualert classify: error: {message}", file=sys.stderr)
        sys.exit(2)


def _signal_arg(text: str) -> int:
    t = text.strip().upper()
    if t.isdigit():
        return int(t)
    name = t if t.startswith("SIG") else "SIG" + t
    try:
        return int(_signal.Signals[name])
    except KeyError:
        raise argparse.ArgumentTypeError(f"not a signal number or name: {text!r}") from None


def _seconds(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration (e.g. 90, 30m, 2h): {text!r}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpualert classify", description="Classify why a job failed from its logs.")
    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="task logs, or a job's spool directory (<spool>/<jobid>: its latest "
                        "attempt's tasks/*.log are judged); <step>.<rank>.log (with a sibling "
                        ".exit record) or "
                        "rank<k>.log names give each log's rank; `gpualert run`'s output.log "
                        "takes its exit.json. The records give the exit status unless "
                        "--exit-code/--signal do")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--exit-code", type=int, help="the job's exit code")
    p.add_argument("--signal", type=_signal_arg, help="the signal that ended the job (9, KILL)")
    p.add_argument("--slurm-state", help="Slurm's final job state (TIMEOUT, OUT_OF_MEMORY, ...)")
    p.add_argument("--slurm-reason", help="Slurm's reason string")
    p.add_argument("--kernel-log", metavar="FILE", help="kernel log lines of the job's window")
    p.add_argument("--hang", type=_seconds, metavar="S", help="hang threshold (seconds, or 30m)")
    p.add_argument("--silence", type=_seconds, metavar="S",
                   help="seconds between the last output and the job's end")
    return p


def _check_readable(path: str, what: str) -> str | None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except FileNotFoundError:
        return f"cannot read {what} {path}: no such file"
    except IsADirectoryError:
        return f"cannot read {what} {path}: it is a directory"
    except OSError as e:
        return f"cannot read {what} {path}: {e.strerror or e}"
    return None


def _record(rec: str) -> dict | None:
    """A JSON record read with the spool's careful reader (no symlink, FIFO or huge file: root
    may run this on a user's job dir); None when missing, refused or not an object."""
    try:
        dfd = os.open(os.path.dirname(rec) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = spool.read_json_nofollow(os.path.basename(rec), dfd)
    except (OSError, spool.SpoolError):
        return None
    finally:
        os.close(dfd)
    return data if isinstance(data, dict) else None


def _read_record(t: TaskInput, rec: str, start: str | None = None) -> None:
    """Exit facts from the tap's <step>.<rank>.exit or `gpualert run`'s exit.json, if there;
    the node from the task's .start record when no exit record names it (a lost node)."""
    data = _record(rec)
    t.node = task_node(data, _record(start) if start is not None else None)
    if data is None:
        return
    for k in ("exit_code", "signal", "end_time"):
        if isinstance(data.get(k), (int, float)) and not isinstance(data.get(k), bool):
            setattr(t, k, data[k] if k == "end_time" else int(data[k]))
    t.core_dumped = bool(data.get("core_dumped"))


def task_from_path(path: str) -> TaskInput:
    """Rank/step from the file name; exit facts from a sibling <step>.<rank>.exit record
    (or exit.json next to `gpualert run --log-dir`'s output.log); the node from the exit
    record, else from the sibling <step>.<rank>.start record."""
    name = os.path.basename(path)  # (os.path, not pathlib: its import is ms of each run)
    t = TaskInput(path=path)
    m = _STEP_RANK.match(name)
    if m:
        t.step, t.rank = m.group("step"), int(m.group("rank"))
        stem = os.path.splitext(path)[0]
        _read_record(t, stem + ".exit", stem + ".start")
    elif name == "output.log":
        _read_record(t, os.path.join(os.path.dirname(path), "exit.json"))
    else:
        m = _RANK.match(name)
        if m:
            t.rank = int(m.group("rank"))
    return t


def job_exit_from_tasks(tasks: list[TaskInput]) -> tuple[int | None, int | None]:
    """The job's (exit code, signal) from its tasks' records: how the first task to fail
    ended; 0 when every task has a record and all exited 0; (None, None) when unknown."""
    known = [t for t in tasks if t.exit_code is not None or t.signal]
    failed = sorted((t for t in known if t.signal or t.exit_code),
                    key=lambda t: t.end_time if t.end_time is not None else float("inf"))
    if failed:
        t = failed[0]
        return (t.exit_code if not t.signal else None), (t.signal or None)
    if known and len(known) == len(tasks):
        return 0, None
    return None, None


def render_text(v: dict) -> str:
    lines = [f"class:      {v['class']} ({v['domain']}, confidence {v['confidence']:.2f})"]
    if v.get("detail"):
        lines.append(f"detail:     {v['detail']}")
    if v.get("root_rank") is not None or v.get("root_node"):
        where = f"rank {v['root_rank']}" if v.get("root_rank") is not None else "rank ?"
        if v.get("root_node"):
            where += f" on {v['root_node']}"
        if v.get("root_step"):
            where += f", step {v['root_step']}"
        lines.append(f"first fail: {where}")
    lines.append(f"hint:       {v['hint']}")
    if v["evidence"]:
        lines.append("evidence:")
        for e in v["evidence"][:5]:
            loc = f"{e['file']}:{e['line']}" if e.get("line") is not None else e["file"]
            lines.append(f"  {loc}: {e['text'][:200]}")
    if v["cascades"]:
        lines.append(f"cascades ({len(v['cascades'])}, symptoms of the above):")
        for c in v["cascades"][:5]:
            loc = f"{c['file']}:{c['line']}" if c.get("line") is not None else c["file"]
            lines.append(f"  rank {c['rank']}: {c['cls']} at {loc}: {c['text'][:160]}")
    return "\n".join(lines)


class JobDirLogs:
    """The task logs of a job directory's latest attempt (docs/CONTRACTS.md, Attempts), opened
    the way the node epilog opens them (hooks/jobspool.py open_task_logs: relative to directory
    fds, O_NOFOLLOW|O_NONBLOCK, then fstat: a plain file of the job's user with one link), so
    a FIFO or symlink a user planted can neither block nor redirect root's `gpualert classify`.
    The classifier reads each checked fd through /proc/self/fd; `names` maps those back."""

    def __init__(self, path: str) -> None:
        from gpualert_slurm.hooks.jobspool import JobSpool, open_task_logs

        self.logs: list = []
        self.left_out: list[str] = []
        self.names: dict[str, str] = {}
        # the directory the admin named is followed; nothing below it is
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        afd = fd
        apath = path  # what an error's relative file name is relative to
        try:
            uid = os.fstat(fd).st_uid
            attempt = spool.latest_attempt(path)
            sub = spool.attempt_subdir(attempt)
            if sub:
                afd = spool.open_dir(sub, fd, shown=os.path.join(path, sub))
                apath = os.path.join(path, sub)
                if os.fstat(afd).st_uid not in (uid, 0):
                    raise spool.SpoolError(f"{apath}: not owned by uid {uid}: refused")
            self.tasks_dir, self.attempt = os.path.join(apath, "tasks"), attempt
            js = JobSpool(path=path, uid=uid, fd=fd, attempt=attempt, attempt_path=apath,
                          attempt_fd=afd)
            self.logs = open_task_logs(js)
            # what was there but refused (FIFO, symlink, hard link, someone else's), to say so
            tfd = js.subdir("tasks")
            if tfd is None:
                raise FileNotFoundError(2, "No such file or directory", self.tasks_dir)
            try:
                there = {n for n in os.listdir(tfd) if _STEP_RANK.match(n)}
            finally:
                os.close(tfd)
            self.left_out = sorted(there - {t.name for t in self.logs})
            self.names = {t.proc_path: t.path for t in self.logs}
        except BaseException as e:
            self.close()
            if isinstance(e, OSError) and e.filename and not os.path.isabs(e.filename):
                e.filename = os.path.join(apath, e.filename)  # opened relative to a dir fd
            raise
        finally:
            for d in {fd, afd}:
                os.close(d)

    def task_inputs(self) -> list[TaskInput]:
        out = []
        for t in self.logs:
            e = t.exit or {}
            out.append(TaskInput(path=t.proc_path, rank=t.rank, node=t.node, step=t.step,
                                 exit_code=e.get("exit_code"), signal=e.get("signal") or None,
                                 core_dumped=bool(e.get("core_dumped")),
                                 end_time=e.get("end_time")))
        return out

    def unproc(self, v: dict) -> dict:
        """The verdict with /proc/self/fd/N put back as the spool paths."""
        for item in [*v.get("evidence", []), *v.get("cascades", [])]:
            if isinstance(item, dict) and item.get("file") in self.names:
                item["file"] = self.names[item["file"]]
        detail = v.get("detail")
        if detail:  # longest first: /proc/self/fd/1 is a prefix of /proc/self/fd/12
            for k in sorted(self.names, key=len, reverse=True):
                detail = detail.replace(k, self.names[k])
            v["detail"] = detail
        return v

    def close(self) -> None:
        from gpualert_slurm.hooks.jobspool import close_task_logs

        close_task_logs(self.logs)
        self.logs = []


def job_dir_logs(path: str) -> JobDirLogs | str:
    """A job directory's task logs, opened safely (JobDirLogs), or an error message saying
    what is wrong; what was refused is said on stderr."""
    try:
        got = JobDirLogs(path)
    except spool.SpoolError as e:
        return f"{e} (a job dir's tasks/ and attempt-N/ must be real directories)"
    except FileNotFoundError as e:
        return (f"{path} is a directory but not a job's spool directory: no "
                f"{e.filename or path} (give task logs, or <spool>/<jobid>)")
    except OSError as e:
        return f"cannot open {e.filename or path}: {e.strerror or e}"
    if got.left_out:
        print(f"gpualert classify: left out of {got.tasks_dir} (not a plain file of the job's "
              f"user: a FIFO, symlink, hard link or device): {', '.join(got.left_out)}",
              file=sys.stderr)
    if not got.logs:
        got.close()
        return f"no task logs in {got.tasks_dir} (attempt {got.attempt}): nothing to classify"
    return got


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    dirs: list[JobDirLogs] = []
    try:
        return _main(args, dirs)
    finally:
        for d in dirs:
            d.close()


def _main(args: argparse.Namespace, dirs: list[JobDirLogs]) -> int:
    logs: list[str] = []
    for path in args.logs:
        if os.path.isdir(path):
            got = job_dir_logs(path)
            if isinstance(got, str):
                print(f"gpualert classify: {got}", file=sys.stderr)
                return 2
            dirs.append(got)
        else:
            logs.append(path)
    if (args.hang is None) != (args.silence is None):
        print("gpualert classify: error: --hang and --silence go together", file=sys.stderr)
        return 2
    for path in logs:
        err = _check_readable(path, "log")
        if err:
            print(f"gpualert classify: {err}", file=sys.stderr)
            return 2
    if args.kernel_log:
        err = _check_readable(args.kernel_log, "kernel log")
        if err:
            print(f"gpualert classify: {err}", file=sys.stderr)
            return 2
    try:
        rules = load_rules()
    except RuleError as e:
        print(f"gpualert classify: bad rule file: {e}", file=sys.stderr)
        return 2
    # One verdict, then exit: the rule set's ~100k objects live to the end, so the cycle
    # collector is told to leave them (and the modules) alone rather than walk them again and
    # again while the logs are read and once more at exit (ms of a small log's run).
    gc.freeze()
    tasks = [t for d in dirs for t in d.task_inputs()] + [task_from_path(p) for p in logs]
    exit_code, sig = args.exit_code, args.signal
    if exit_code is None and sig is None:  # not given: the logs' exit records say it
        exit_code, sig = job_exit_from_tasks(tasks)
    job = JobFacts(
        exit_code=exit_code,
        signal=sig,
        slurm_state=args.slurm_state.upper() if args.slurm_state else None,
        slurm_reason=args.slurm_reason,
        kernel_log=args.kernel_log,
        hang_threshold_s=args.hang,
        silence_s=args.silence,
    )
    verdict = classify(tasks, job, rules).to_json()
    for d in dirs:
        d.unproc(verdict)
    try:
        print(json.dumps(verdict) if args.json else render_text(verdict), flush=True)
    except BrokenPipeError:  # `| head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
