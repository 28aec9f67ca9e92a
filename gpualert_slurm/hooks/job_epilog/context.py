"""What the job epilog's parts share: one `JobEpilog` (config, the job's options and
environment, its spool and task logs, the hook's log, the verdict being built) and its `Budget`
(the time bound, counted once from the hook's start), in place of the 8 to 11 arguments each
part was handed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gpualert_slurm.core.config import Config, ReportConfig
from gpualert_slurm.core.options import Options
from gpualert_slurm.hooks.common import HookLog
from gpualert_slurm.hooks.jobspool import JobSpool, TaskLog
from gpualert_slurm.hooks.run_hook import shim_left_s

WATCHDOG_MARGIN_S = 2.0  # the send stops this short of the watchdog


def report_cfg(cfg: Config) -> ReportConfig:
    return getattr(cfg, "report", None) or ReportConfig()


@dataclass(frozen=True)
class Budget:
    """The job epilog's time, from the hook's start (time.monotonic). The nodes' evidence is
    waited for until at most 45 % of the bound; the classifier may run until the reserve; the
    reserve (a quarter of the bound, 6 s at least) is for artifacts, rendering and the outbox
    write, so that a slow classifier or an overloaded controller still leaves the report in the
    outbox before the watchdog ends the hook."""

    bound: float
    t0: float = field(default_factory=time.monotonic)

    @classmethod
    def for_hook(cls, cfg: Config, t0: float) -> Budget:
        """The nodes' wait plus the hook's own time, within what the shim leaves: its timeout
        counts from the process's start, and the interpreter's start-up on a loaded controller
        is part of it."""
        return cls(max(1.0, min(cfg.epilog_wait_s + cfg.hook_timeout_s, shim_left_s())), t0)

    @classmethod
    def until(cls, deadline: float) -> Budget:
        """From now until a monotonic deadline (a later epilog finishing a report)."""
        t0 = time.monotonic()
        return cls(max(1.0, deadline - t0), t0)

    @property
    def reserve(self) -> float:
        return max(6.0, self.bound / 4)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        """Until the bound (the watchdog's)."""
        return self.bound - self.elapsed()

    def before_reserve(self) -> float:
        """Until the send's reserve begins."""
        return self.bound - self.reserve - self.elapsed()

    def before_watchdog(self) -> float:
        return self.bound - WATCHDOG_MARGIN_S - self.elapsed()

    def warm_up_left(self) -> float:
        """The rules' and templates' warm-up may take a quarter of the bound."""
        return max(0.0, self.bound / 4 - self.elapsed())

    def node_wait_left(self, cfg: Config) -> float:
        """How long the nodes' verdicts are still waited for."""
        wait = max(0.0, min(cfg.epilog_wait_s, self.bound - cfg.hook_timeout_s,
                            0.45 * self.bound))
        return max(0.0, wait - self.elapsed())

    def spare(self) -> bool:
        """Time for another job's unfinished report (twice the reserve left)."""
        return self.left() > self.reserve * 2

    def sweep_deadline(self) -> float:
        """The monotonic time other jobs' reports must be done by: the reserve's start."""
        return self.t0 + self.bound - self.reserve


@dataclass
class JobEpilog:
    """One job's epilog: what every part of it reads, and what it has built so far."""

    cfg: Config
    opts: Options
    env: dict[str, str]
    log: HookLog
    budget: Budget
    js: JobSpool | None = None      # None: the job has no spool dir (never ran)
    tasks: list[TaskLog] = field(default_factory=list)
    verdict: dict[str, Any] | None = None  # verdict.json's content, once built
    # slurmstepd's own lines in the job's StdOut file (facts.slurm_output): (the file, lines)
    slurm_output: tuple[str, list[str]] | None = None
    # when Slurm started this epilog (the queued file's time): facts.ended_attempt
    started_at: float = 0.0
    attempt: int | None = None  # the run that ended (facts.ended_attempt), once known

    @property
    def jobid(self) -> str:
        return self.env["SLURM_JOB_ID"]

    @property
    def rc(self) -> ReportConfig:
        return report_cfg(self.cfg)

    @property
    def spool(self) -> JobSpool:
        """The job's spool, for the parts that run only once it is open."""
        assert self.js is not None
        return self.js

    @property
    def array_id(self) -> str:
        return self.env.get("SLURM_ARRAY_JOB_ID", "")

    @property
    def task_id(self) -> str:
        return self.env.get("SLURM_ARRAY_TASK_ID", "")

    @property
    def is_array(self) -> bool:
        return self.array_id.isdigit() and self.task_id.isdigit()

    @property
    def array_summary(self) -> bool:
        """An array task whose report goes into the array's one summary."""
        return self.is_array and self.rc.arrays == "summary"
