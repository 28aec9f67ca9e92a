"""hooks/job_epilog/context.Budget: the job epilog's time, counted once from the hook's start.
The nodes' evidence is waited for until at most 45 % of the bound, the classifier may run until
the send's reserve (a quarter of the bound, 6 s at least), the send stops 2 s short of the
watchdog, and a later job's unfinished report is taken on only with twice the reserve left."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpualert_slurm.core.config import parse_config
from gpualert_slurm.hooks.job_epilog.context import Budget


def cfg(wait: float, hook: float):
    return parse_config({"epilog_wait_s": wait, "hook_timeout_s": hook}, "test.yaml")


def test_the_reserve_is_a_quarter_of_the_bound_and_never_under_6_s():
    assert Budget(40.0).reserve == 10.0
    assert Budget(8.0).reserve == 6.0


def test_the_shares_count_from_the_hooks_start_not_from_each_call():
    b = Budget(40.0, t0=time.monotonic() - 5.0)  # the hook began 5 s ago
    assert b.left() == pytest.approx(35.0, abs=0.5)
    assert b.before_reserve() == pytest.approx(25.0, abs=0.5)
    assert b.before_watchdog() == pytest.approx(33.0, abs=0.5)
    assert b.warm_up_left() == pytest.approx(5.0, abs=0.5)
    assert b.sweep_deadline() == pytest.approx(b.t0 + 30.0)


def test_the_nodes_are_waited_for_within_epilog_wait_s_what_the_hook_leaves_and_45_percent():
    now = time.monotonic()
    # epilog_wait_s 30 + hook_timeout_s 20, all of it left: 45 % of 50 s cuts the wait
    assert Budget(50.0, t0=now).node_wait_left(cfg(30, 20)) == pytest.approx(22.5, abs=0.1)
    # the shim left only 35 s: the hook's own 20 s come first, 15 s for the nodes
    assert Budget(35.0, t0=now).node_wait_left(cfg(30, 20)) == pytest.approx(15.0, abs=0.1)
    # a short epilog_wait_s is kept; once past it, nothing more is waited for
    assert Budget(50.0, t0=now).node_wait_left(cfg(3, 20)) == pytest.approx(3.0, abs=0.1)
    assert Budget(50.0, t0=now - 4.0).node_wait_left(cfg(3, 20)) == 0.0


def bound_in_a_fresh_hook(shim_timeout: str) -> tuple[float, float]:
    """(Budget.for_hook's bound, the process's age) in a new process: the shim's timeout
    counts from the process's start, so its start-up is spent already."""
    code = ("import time\n"
            "from gpualert_slurm.core.config import parse_config\n"
            "from gpualert_slurm.hooks.job_epilog.context import Budget\n"
            "from gpualert_slurm.hooks.run_hook import process_age\n"
            "c = parse_config({'epilog_wait_s': 30, 'hook_timeout_s': 20}, 'test.yaml')\n"
            "print(Budget.for_hook(c, time.monotonic()).bound, process_age())\n")
    env = dict(os.environ, GPUALERT_HOOK_TIMEOUT=shim_timeout)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    bound, age = out.stdout.split()
    return float(bound), float(age)


def test_the_bound_is_the_wait_plus_the_hook_within_what_the_shim_leaves():
    bound, age = bound_in_a_fresh_hook("55")  # the job epilog shim's default
    assert bound == pytest.approx(min(30.0 + 20.0, 55.0 - 3.0 - age), abs=0.05)
    bound, age = bound_in_a_fresh_hook("25")  # the shim's 25 s, 3 s margin, the start-up spent
    assert bound == pytest.approx(max(1.0, 25.0 - 3.0 - age), abs=0.05) and bound < 22.0


def test_another_jobs_report_is_taken_on_only_with_twice_the_reserve_left():
    assert Budget(40.0).spare()  # 40 s left > 2 x 10 s
    assert not Budget(40.0, t0=time.monotonic() - 21.0).spare()


def test_a_later_epilog_finishing_a_report_gets_until_its_deadline_at_least_a_second():
    assert Budget.until(time.monotonic() + 12.0).bound == pytest.approx(12.0, abs=0.1)
    assert Budget.until(time.monotonic() - 5.0).bound == 1.0
