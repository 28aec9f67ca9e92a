"""`gpualert eval`: scores, baselines, synthetic split and errors, on a small built corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpualert_slurm.commands.eval import score

REPO = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures" / "classify"


def gpualert(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "gpualert_slurm", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def _case(root: Path, cid: str, logs: dict[str, str]) -> None:
    d = root / "cases" / cid
    d.mkdir(parents=True)
    for name, text in logs.items():
        (d / name).write_text(text)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    _case(root, "oom", {"0.0.log": (FIX / "cuda_oom_then_nccl.log").read_text()})
    _case(root, "ok", {"batch.0.log": "UserWarning: error-prone flag\nstep 1 done\n"})
    _case(root, "tl", {"batch.0.log": "step 1 loss=0.2\nstep 2 loss=0.1\n"})
    _case(root, "mr", {"0.0.log": (FIX / "nccl_rank0.log").read_text(),
                       "0.1.log": "ModuleNotFoundError: No module named 'apex'\n"})

    def task(cid, log, rank=0, step="0", exit_code=1, end=None, node="n1"):
        return {"log": f"cases/{cid}/{log}", "rank": rank, "node": node, "step": step,
                "exit_code": exit_code, "signal": None, "core_dumped": False, "end_time": end}

    base = {"root_rank": None, "source": "reproduced", "command": "test", "how": None,
            "signal": None, "slurm_reason": None, "hang_threshold_s": None, "silence_s": None,
            "kernel_log": None}
    labels = [
        {**base, "id": "oom", "class": "cuda_oom", "exit_code": 1, "slurm_state": "FAILED",
         "tasks": [task("oom", "0.0.log")]},
        {**base, "id": "ok", "class": "success", "exit_code": 0, "slurm_state": "COMPLETED",
         "tasks": [task("ok", "batch.0.log", step="batch", exit_code=0)]},
        {**base, "id": "tl", "class": "time_limit", "exit_code": None, "slurm_state": "TIMEOUT",
         "tasks": [task("tl", "batch.0.log", step="batch", exit_code=None)]},
        {**base, "id": "mr", "class": "import_error", "exit_code": 1, "slurm_state": "FAILED",
         "root_rank": 1, "source": "synthetic", "how": "two rank logs written by hand",
         "tasks": [task("mr", "0.0.log", 0, end=20.0), task("mr", "0.1.log", 1, end=10.0,
                                                             node="n2")]},
    ]
    (root / "labels.jsonl").write_text("\n".join(json.dumps(x) for x in labels) + "\n")
    return root


def test_eval_json_scores_and_baselines(corpus):
    p = gpualert("eval", "--json", str(corpus))
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    rows = {r["id"]: r for r in rep["cases"]}
    assert {k: r["ours"] for k, r in rows.items()} == \
        {"oom": "cuda_oom", "ok": "success", "tl": "time_limit", "mr": "import_error"}
    assert {k: r["exit_only"] for k, r in rows.items()} == \
        {"oom": "unknown", "ok": "success", "tl": "time_limit", "mr": "unknown"}
    assert rows["ok"]["keywords"] == "python_exception"  # "error" in a warning fools a grep
    assert rows["mr"]["root_ours"] == 1
    allc = rep["sections"]["all cases"]
    assert allc["ours"]["macro_f1"] == 1.0
    assert allc["exit_only"]["macro_f1"] == pytest.approx(0.5)
    assert allc["root_rank"] == {"n": 1, "accuracy": 1.0}
    real = rep["sections"]["without synthetic"]
    assert real["ours"]["n"] == 3 and real["root_rank"]["n"] == 0


def test_eval_text_report(corpus):
    p = gpualert("eval", str(corpus))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for needle in ("macro-F1", "exit-code only", "keywords", "root-rank accuracy",
                   "== all cases (4 cases)", "== without synthetic (3 cases)", "confusion matrix",
                   "cuda_oom"):
        assert needle in out, needle
    p2 = gpualert("eval", "--exclude-synthetic", str(corpus))
    assert "== all cases" not in p2.stdout and "== without synthetic" in p2.stdout


def test_eval_of_an_all_synthetic_set_reports_only_all_cases(corpus):
    labels = [json.loads(x) for x in (corpus / "labels.jsonl").read_text().splitlines()]
    (corpus / "labels.jsonl").write_text("".join(
        json.dumps({**lab, "source": "synthetic", "how": "by hand"}) + "\n" for lab in labels))
    p = gpualert("eval", str(corpus))
    assert p.returncode == 0, p.stderr
    assert "== all cases (4 cases)" in p.stdout and "== without synthetic" not in p.stdout
    p = gpualert("eval", "--exclude-synthetic", str(corpus))
    assert p.returncode == 0 and "== " not in p.stdout, p.stdout + p.stderr


def test_eval_unreadable_corpus_exits_2(tmp_path):
    p = gpualert("eval", str(tmp_path / "nope"))
    assert p.returncode == 2 and "not a directory" in p.stderr
    p = gpualert("eval", str(tmp_path))
    assert p.returncode == 2 and "labels.jsonl" in p.stderr
    (tmp_path / "labels.jsonl").write_text('{"id": "a", "class": "x"}\n{broken\n')
    p = gpualert("eval", str(tmp_path))
    assert p.returncode == 2 and "labels.jsonl:2" in p.stderr and "Traceback" not in p.stderr


def test_score_math():
    s = score(["a", "a", "b", "c"], ["a", "b", "b", "b"])
    assert s["per_class"]["a"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3),
                                   "support": 2}
    assert s["per_class"]["b"]["precision"] == pytest.approx(1 / 3)
    assert s["macro_f1"] == pytest.approx((2 / 3 + 0.5 + 0) / 3)
    assert s["confusion"] == {"a -> a": 1, "a -> b": 1, "b -> b": 1, "c -> b": 1}
