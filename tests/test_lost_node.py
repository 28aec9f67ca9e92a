"""A node that is lost (power, kernel panic, `docker kill`) leaves no exit record for its ranks:
their start records (spank/README.md, Start records) tie them to the node, and a node-failure
verdict names the lost node and its first rank. Job dirs are built as the tap leaves them."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from test_epilog import JOB, epilogs, site_cfg
from test_prolog import USER, make_env, prolog

from gpualert_slurm.classify import JobFacts, TaskInput, classify
from gpualert_slurm.commands.classify import task_from_path

REPO = Path(__file__).resolve().parent.parent

TICKS = "".join(f"rank {{r}} tick {i}\n" for i in range(1, 30))
BATCH = ("start\nsrun: error: Node failure on n2\n"
         "srun: error: n1: task 0: Killed\nsrun: error: n3: task 2: Killed\n")


def _write(path: Path, data: str, owner: bool) -> None:
    path.write_text(data)
    if owner:
        os.chown(path, USER.pw_uid, USER.pw_gid)


def lost_node_tasks(tasks: Path, lost: dict[int, str], survivors: dict[int, str],
                    batch: str = BATCH, owner: bool = False) -> None:
    """tasks/ as the tap leaves it when `lost` ranks' node died: every rank has a log and a
    start record; only the survivors (killed by srun after the loss) have an exit record."""
    tasks.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for rank, node in {**lost, **survivors}.items():
        _write(tasks / f"0.{rank}.log", TICKS.format(r=rank), owner)
        _write(tasks / f"0.{rank}.start", json.dumps(
            {"node": node, "step": "0", "rank": rank, "pid": 4000 + rank,
             "start_time": now - 60, "attempt": 0}), owner)
    for rank, node in survivors.items():
        _write(tasks / f"0.{rank}.exit", json.dumps(
            {"node": node, "step": "0", "rank": rank, "pid": 4000 + rank, "exit_code": None,
             "signal": 9, "core_dumped": False, "end_time": now, "status": 9,
             "attempt": 0, "log_flushed": True}), owner)
    _write(tasks / "batch.0.log", batch, owner)


def cli(*args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "classify", "--json", *args],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_cli_job_dir_names_the_lost_node_and_its_rank(tmp_path):
    lost_node_tasks(tmp_path / "123" / "tasks", {1: "n2"}, {0: "n1", 2: "n3"})
    v = cli("--slurm-state", "NODE_FAIL", str(tmp_path / "123"))
    assert v["class"] == "node_failure", v
    # srun's "n1: task 0: Killed" names a survivor: the lost node's rank is the root
    assert (v["root_node"], v["root_rank"], v["root_step"]) == ("n2", 1, "0"), v
    assert "rank 1 ran on n2 and left no exit record" in v["detail"], v


def test_node_comes_from_the_start_record_and_the_exit_record_wins(tmp_path):
    tasks = tmp_path / "tasks"
    lost_node_tasks(tasks, {1: "n2"}, {0: "n1"})
    # a start record that disagrees with the exit record: the exit record is the later word
    (tasks / "0.0.start").write_text(json.dumps({"node": "n9", "step": "0", "rank": 0}))
    t1, t0 = task_from_path(str(tasks / "0.1.log")), task_from_path(str(tasks / "0.0.log"))
    assert (t1.node, t1.rank, t1.step, t1.exit_code, t1.signal, t1.end_time) == \
        ("n2", 1, "0", None, None, None)
    assert (t0.node, t0.signal) == ("n1", 9)


def test_linked_fifo_or_huge_start_records_are_refused(tmp_path):
    tasks = tmp_path / "tasks"
    lost_node_tasks(tasks, {1: "n2", 3: "n2", 4: "n2"}, {0: "n1"})
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps({"node": "SECRET", "step": "0", "rank": 1}))
    (tasks / "0.1.start").unlink()
    (tasks / "0.1.start").symlink_to(other)
    (tasks / "0.3.start").unlink()
    os.mkfifo(tasks / "0.3.start")  # opened non-blocking and refused: nothing waits on it
    (tasks / "0.4.start").write_text('{"node": "n2", "pad": "' + "x" * 2_000_000 + '"}')
    for rank in (1, 3, 4):
        assert task_from_path(str(tasks / f"0.{rank}.log")).node is None, rank


def test_state_alone_finds_the_node_none_of_whose_ranks_exited(tmp_path):
    """NODE_FAIL with no log line naming the node: the node whose ranks all lack an exit
    record, while other nodes' ranks have one, is the lost one; several lost ranks are all
    named, the first one is the root."""
    tasks = tmp_path / "tasks"
    lost_node_tasks(tasks, {1: "n2", 4: "n2"}, {0: "n1", 2: "n3", 3: "n1"}, batch="start\n")
    inputs = [task_from_path(str(p)) for p in sorted(tasks.glob("*.log"))]
    v = classify(inputs, JobFacts(slurm_state="NODE_FAIL"))
    assert v.cls == "node_failure"
    assert (v.root_node, v.root_rank, v.root_step) == ("n2", 1, "0"), v
    assert "ranks 1, 4 ran on n2" in v.detail, v.detail
    assert {"file": "(task records)", "line": None,
            "text": "rank 4 (step 0) started on n2, no exit record"} in [e.to_json()
                                                                        for e in v.evidence]


def test_no_node_is_guessed_without_exit_records_to_compare():
    # No task has an exit record (a corpus case, a log given alone): nothing says which
    # node was lost, so the verdict does not name one from the task list.
    tasks = [TaskInput(path="/dev/null", rank=r, node=n, step="0")
             for r, n in ((0, "n1"), (1, "n2"))]
    v = classify(tasks, JobFacts(slurm_state="NODE_FAIL"))
    assert v.cls == "node_failure" and v.root_node is None and v.root_rank is None, v


def test_a_named_lost_node_without_start_records_is_still_the_root(tmp_path):
    # srun names n2 and a survivor on n1; no task is known to have run on n2: the root is
    # the node, and no surviving rank is blamed for it.
    log = tmp_path / "batch.0.log"
    log.write_text(BATCH)
    t0 = TaskInput(path="/dev/null", rank=0, node="n1", step="0", signal=9, end_time=1.0)
    v = classify([TaskInput(path=str(log), rank=0, step="batch"), t0],
                 JobFacts(slurm_state="NODE_FAIL"))
    assert (v.cls, v.root_node, v.root_rank) == ("node_failure", "n2", None), v


def test_job_epilog_verdict_names_the_lost_rank(tmp_path):
    """The hooks as Slurm runs them: n2 was lost, so only n1's and n3's Epilogs run; the job
    epilog's verdict.json names n2 and rank 1, and its task list says where rank 1 ran."""
    spool, cfg = site_cfg(tmp_path, "127.0.0.1:9", hook_timeout_s=10)
    env = make_env(cfg, jobid=JOB)
    assert prolog(env).returncode == 0
    lost_node_tasks(spool / JOB / "tasks", {1: "n2"}, {0: "n1", 2: "n3"}, owner=True)
    epilogs(env, nodes=("n1", "n3"))
    verdict = json.loads((spool / JOB / "verdict.json").read_text())
    v = verdict["verdict"]
    assert (v["class"], v["root_node"], v["root_rank"]) == ("node_failure", "n2", 1), verdict
    nodes = {t["rank"]: t["node"] for t in verdict["tasks"] if t["step"] == "0"}
    assert nodes == {0: "n1", 1: "n2", 2: "n3"}, verdict["tasks"]
