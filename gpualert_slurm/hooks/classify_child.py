"""The classifier, run for a hook in a forked child: started at once so the caller can do other
work meanwhile, killed at its bound, and an 'unknown' verdict when it raises or runs late (a
broken or slow classifier must still leave a report). Both epilogs use it."""

from __future__ import annotations

import os
import tempfile
from contextlib import suppress
from typing import Any

from gpualert_slurm.hooks.jobspool import TaskLog


class PendingVerdict:
    """A classification running in a forked child (started at once, so the caller can do
    other work meanwhile); result() gives (verdict JSON, error or None)."""

    def __init__(self, tasks: list[TaskLog], facts: dict[str, Any],
                 kernel_lines: list[str], nice: int = 0,
                 slurm_output: tuple[str, list[str]] | None = None) -> None:
        self.kpath: str | None = None
        self.opath: str | None = None
        self.child: Any = None
        self.error: str | None = None
        self.names = {t.proc_path: t.path for t in tasks}
        try:
            from gpualert_slurm.classify import (
                JobFacts,
                RuleError,
                TaskInput,
                classify,
                load_rules,
            )
            from gpualert_slurm.core.artifacts import Forked

            if kernel_lines:
                kfd, self.kpath = tempfile.mkstemp(prefix="gpualert-kernel-", suffix=".log")
                with os.fdopen(kfd, "w") as f:
                    f.write("\n".join(kernel_lines) + "\n")
                self.names[self.kpath] = "(kernel log)"
            inputs = []
            if slurm_output:
                # slurmstepd's lines from the job's StdOut file: one more log of the job's
                ofd, self.opath = tempfile.mkstemp(prefix="gpualert-stdout-", suffix=".log")
                with os.fdopen(ofd, "w") as f:
                    f.write("\n".join(slurm_output[1]) + "\n")
                self.names[self.opath] = slurm_output[0]
                inputs.append(TaskInput(path=self.opath, step="batch"))
            for t in tasks:
                e = t.exit or {}
                inputs.append(TaskInput(
                    path=t.proc_path, rank=t.rank, node=t.node, step=t.step,
                    exit_code=e.get("exit_code"), signal=e.get("signal") or None,
                    core_dumped=bool(e.get("core_dumped")), end_time=e.get("end_time")))
            jf = JobFacts(**{k: facts.get(k) for k in (
                "exit_code", "signal", "slurm_state", "slurm_reason", "nvml",
                "hang_threshold_s", "silence_s")}, kernel_log=self.kpath)

            def judge() -> dict[str, Any]:
                if nice:
                    os.nice(nice)
                note = None
                try:
                    v = classify(inputs, jf)
                except RuleError as e:  # a broken site rule must not cost the user the report
                    v = classify(inputs, jf, load_rules(site=False))
                    note = f"site rules ignored: {e}"
                out = v.to_json()
                if note:
                    out["detail"] = "; ".join(x for x in (out.get("detail"), note) if x)
                return out

            self.child = Forked(judge)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"

    def cancel(self) -> None:
        if self.child is not None:
            self.child.cancel()
        self._cleanup()

    def _cleanup(self) -> None:
        for p in (self.kpath, self.opath):
            if p:
                with suppress(OSError):
                    os.unlink(p)
        self.kpath = self.opath = None

    def result(self, timeout_s: float) -> tuple[dict[str, Any], str | None]:
        try:
            if self.error:
                raise RuntimeError(self.error)
            out = self.child.result(timeout_s)
            for item in [*out.get("evidence", []), *out.get("cascades", [])]:
                if isinstance(item, dict) and item.get("file") in self.names:
                    item["file"] = self.names[item["file"]]
            out["detail"] = _unproc(out.get("detail") or "", self.names)
            return out, None
        except Exception as e:  # the classifier raising or too slow: report anyway
            return ({"class": "unknown", "domain": "unknown", "confidence": 0.0,
                     "hint": "gpualert could not classify this job; the logs below are "
                             "complete.",
                     "detail": f"classifier error: {type(e).__name__}: {e}", "evidence": [],
                     "root_rank": None, "root_node": None, "root_step": None,
                     "cascades": []},
                    f"{type(e).__name__}: {e}")
        finally:
            self._cleanup()


def classify_tasks(tasks: list[TaskLog], facts: dict[str, Any], kernel_lines: list[str],
                   timeout_s: float = 60.0, slurm_output: tuple[str, list[str]] | None = None
                   ) -> tuple[dict[str, Any], str | None]:
    """The classifier's verdict as JSON, with file names mapped back from /proc/self/fd to the
    spool paths, or (an 'unknown' verdict, the error) when the classifier raised or ran past
    timeout_s (a huge log on a busy node): a broken or slow classifier must still leave a
    report. It runs in a forked child, which can be killed at the bound."""
    return PendingVerdict(tasks, facts, kernel_lines,
                          slurm_output=slurm_output).result(timeout_s)


def _unproc(text: str, names: dict[str, str]) -> str:
    for k, v in names.items():
        text = text.replace(k, v)
    return text
