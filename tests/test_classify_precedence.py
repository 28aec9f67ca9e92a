"""The decision order (classify/precedence.yaml, read by classify/precedence.py) and the steps
it orders (classify/steps.py STEPS): every step is in the file and every id of the file is a
step; the file's rule lists reach the steps; reading a precedence text gives a value and
changes nothing the classifier decides with (it used to reset module globals)."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import job_verdict, task

from gpualert_slurm.classify import RuleError, load_precedence, precedence
from gpualert_slurm.classify.steps import STEPS, shipped_precedence

PROGRESS = "".join(f"epoch {i} step {i * 50} loss {1 / (i + 1):.4f}\n" for i in range(10))
TB = ('Traceback (most recent call last):\n  File "/srv/app/run.py", line 88, in main\n'
      '    batch = next(it)\n')
WORKER_LOST = "RuntimeError: DataLoader worker (pid 3321) is killed by signal: Killed.\n"
KERNEL_OOM = ("[81234.5] Memory cgroup out of memory: Killed process 3321 (pt_data_worker) "
              "total-vm:9123456kB, anon-rss:8123456kB\n")


def test_every_step_is_ordered_and_every_ordered_id_is_a_step() -> None:
    ids = load_precedence()
    assert sorted(ids) == sorted(STEPS)
    assert ids[-1] == "unknown"


def test_the_shipped_file_gives_the_steps_their_rule_lists() -> None:
    p = shipped_precedence()
    assert p.steps == tuple(load_precedence())
    assert {"dataloader_worker", "elastic_child_killed"} <= p.symptoms["worker_oom"]
    assert "killed_text" in p.symptoms["killed_memory"]
    assert "slurm_memory_verdict" in p.verdicts["host_oom_state"]
    assert p.verdicts["host_oom_state:verdicts_over_warnings"] == {"slurm_oom_event"}


def test_a_rule_list_that_is_not_a_list_is_refused_naming_its_field() -> None:
    with pytest.raises(RuleError, match="step 'worker_oom': field 'symptoms' must be a list"):
        precedence.load("steps:\n  - {id: worker_oom, symptoms: dataloader_worker}\n"
                        "  - unknown\n", STEPS)
    with pytest.raises(RuleError, match="field 'verdicts_over_warnings' must be a list"):
        precedence.load("steps:\n  - {id: host_oom_state, verdicts_over_warnings: 3}\n"
                        "  - unknown\n", STEPS)


def _worker_oom_job(tmp_path: Path):
    kern = tmp_path / "kern.log"
    kern.write_text(KERNEL_OOM)
    return job_verdict([task(tmp_path, PROGRESS + TB + WORKER_LOST)], kernel_log=str(kern))


def test_reading_another_precedence_changes_no_verdict(tmp_path: Path) -> None:
    shipped = shipped_precedence()
    before = _worker_oom_job(tmp_path)
    assert before.cls == "host_oom" and before.decided_by == "worker_oom", before.to_json()
    # another order, whose worker_oom step names no symptom: a value of its own
    other = precedence.load("steps:\n  - {id: worker_oom, symptoms: []}\n  - unknown\n", STEPS)
    assert other.steps == ("worker_oom", "unknown")
    assert other.symptoms == {"worker_oom": frozenset()}
    assert shipped_precedence() is shipped
    after = _worker_oom_job(tmp_path)
    assert after.to_json() == before.to_json()
