"""hooks/array_acct.py: the array's one summary waits for tasks accounting says ran whose job
epilog has not recorded them yet (slurmctld forgets a finished task MinJobAge after its end),
asking sacct only when its kept answer holds no such task; a task that ended longer ago than any
epilog runs is not waited for. sacct is the real one of this machine's cluster."""

from __future__ import annotations

import time

from gpualert_slurm.hooks import array_acct


def test_kept_answer_is_used_while_tasks_are_still_to_come() -> None:
    state = {"array_id": "999999001", "accounted": {"1": 0.0, "2": time.time() - 5}}
    assert array_acct.still_to_come(state, {"1"}, time.time()) == {"2"}
    assert state["accounted"] == {"1": 0.0, "2": state["accounted"]["2"]}  # not asked again


def test_a_task_gone_longer_than_any_epilog_is_not_waited_for() -> None:
    now = time.time()
    state = {"array_id": "999999002",
             "accounted": {"1": now - array_acct.GONE_AFTER_S - 5, "2": now - 1}}
    assert array_acct.still_to_come(state, set(), now) == {"2"}


def test_all_recorded_lets_the_summary_go() -> None:
    # every kept task is done: accounting is asked once more (an array id it does not know has
    # no task; sacct not answering must not hold the summary either)
    state = {"array_id": "999999003", "accounted": {"1": 0.0}}
    assert array_acct.still_to_come(state, {"1"}, time.time()) == set()


def test_an_array_slurmctld_forgot_has_no_active_task(cluster) -> None:
    """squeue says 'Invalid job id specified' for an array slurmctld no longer holds (all
    tasks past MinJobAge): none of its tasks is active, which lets the queue worker settle its
    summary; Slurm not answering at all is not that."""
    import clusterlib as cl

    with cl.using_conf(cluster):
        assert array_acct.active_tasks("999999004") == set()
    import os

    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = "/nonexistent/slurm.conf"
    try:
        assert array_acct.active_tasks("999999004", timeout=10) is None
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def test_kept_squeue_answer_spares_slurmctld_while_a_task_is_to_come() -> None:
    """The job epilog's array step (job_epilog/arrays.py): while a task slurmctld last said had
    nodes has not recorded itself, this task cannot be the last one, and slurmctld is not
    asked again (each task of a 500-task burst asked for the whole array). The array id is one
    no Slurm knows: had it asked, the answer would be None."""
    from gpualert_slurm.hooks.job_epilog.arrays import _still_to_come

    state = {"tasks": {"1": {"task_id": "1"}, "3": {"task_id": "3", "in_flight": True,
                                                   "since": time.time()}},
             "to_come": ["1", "2", "3", "4"]}
    assert _still_to_come(state, "999999005", "4") == ({"2", "3"}, set())
    # an epilog in flight for longer than any runs is not waited for; nor this task itself
    state["tasks"]["3"]["since"] = time.time() - 3600
    state["tasks"]["2"] = {"task_id": "2"}
    left, never = _still_to_come(state, "999999005", "4")
    assert (left, never) == (None, set())  # the kept answer is spent: slurmctld was asked
