"""The classifier on inputs as real logs have them, across families: evidence wherever it appears
in a line (line_view: what wraps a message), a real failure in every launcher and paste shape,
the wordings of frameworks of several families, the scanner's time budget and the end of a file
it always reads; and the checks against the real-world corpus (its labels, every rule's own
literals against every corpus line). Real failing processes where they can run here. The tests
of one rule family are in that family's tests/test_classify_<family>.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from classifylib import LOSSES, run_py, write

from gpualert_slurm.classify import (
    JobFacts,
    TaskInput,
    classify,
    load_rules,
)
from gpualert_slurm.classify.scan import line_view, scan_file

SHAPED = [
    ("crlf", lambda t: t.replace("\n", "\r\n")),
    ("quoted", lambda t: "".join("> " + ln + "\n" for ln in t.splitlines())),
    ("markdown", lambda t: "**Error:**\n```\n" + t + "```\n"),
    ("indented", lambda t: "".join("    " + ln + "\n" for ln in t.splitlines())),
    ("timestamps", lambda t: "".join(f"2026-11-29T10:00:{i:02d}Z {ln}\n"
                                     for i, ln in enumerate(t.splitlines()))),
    ("windows", lambda t: t.replace("/", "\\")),
    ("cut-tail", lambda t: t.rstrip("\n")),
]


# ---- line shapes -----------------------------------------------------------------------------

@pytest.mark.parametrize("line,body,labels", [
    ("0: ModuleNotFoundError: No module named 'x'", "ModuleNotFoundError: No module named 'x'",
     {"task": 0}),
    ("[rank5]: RuntimeError: boom", "RuntimeError: boom", {"rank": 5}),
    ("[default3]:[rank7]:  File \"t.py\", line 1", " File \"t.py\", line 1",
     {"local": 3, "rank": 7}),
    ("[1,3]<stderr>:KeyError: 'a'", "KeyError: 'a'", {"task": 3}),
    ("gpu041: Traceback (most recent call last):", "Traceback (most recent call last):", {}),
    ("2026-11-29 10:00:01,123 - ERROR - x", "ERROR - x", {}),
    ("[2023-06-07 22:16:00,018] [INFO] y", "[INFO] y", {}),
    ("[ 4821.553190] Out of memory: Killed process 1 (python)",
     "Out of memory: Killed process 1 (python)", {}),
    ("Nov 29 10:00:00 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79", "NVRM: Xid (PCI:0000:3b:00): 79",
     {}),
    ("> >   File \"C:\\Users\\me\\torch\\serialization.py\", line 3",
     "  File \"C:/Users/me/torch/serialization.py\", line 3", {}),
    ("**RuntimeError: CUDA error: out of memory**", "RuntimeError: CUDA error: out of memory", {}),
    (" 60%|######    | 60/100 [00:01<00:00, 40.0it/s]bash: line 1:  7915 Killed   python t.py",
     "bash: line 1:  7915 Killed   python t.py", {}),
    # not prefixes: Slurm's *** markers, a dotted exception with a digit in its module
    ("slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026 DUE TO TIME LIMIT ***",
     "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026 DUE TO TIME LIMIT ***", {}),
    ("sqlite3.OperationalError: no such table: m", "sqlite3.OperationalError: no such table: m",
     {}),
    ("  File \"/x/torch/__init__.py\", line 3, in __call__",
     "  File \"/x/torch/__init__.py\", line 3, in __call__", {}),
    ("    y = x**2 + z", "    y = x**2 + z", {}),
    ("> **ValueError**: bad", "ValueError: bad", {}),
    ("trainer-1  | RuntimeError: CUDA out of memory", "RuntimeError: CUDA out of memory", {}),
    ("[pod/trainer-0/main] KeyError: 1", "KeyError: 1", {}),
    ("Nov 29 10:00:00 n1 python[4242]: MemoryError", "MemoryError", {}),
])
def test_line_view_removes_what_wraps_a_message(line, body, labels):
    v = line_view(line)
    assert v.body == body
    assert {k: getattr(v, k) for k in ("task", "rank", "local") if getattr(v, k) is not None} \
        == labels


@pytest.mark.parametrize("shape,fn", SHAPED, ids=[s[0] for s in SHAPED])
@pytest.mark.parametrize("code,cls", [
    ("import no_such_module_here_xyz", "import_error"),
    ("open('/nonexistent/dir/data.csv')", "file_not_found"),
    ("d = {}\nd['batch_size']", "python_exception"),
])
def test_a_real_failure_in_every_shape_keeps_its_class(tmp_path, shape, fn, code, cls):
    t = run_py(tmp_path, code)
    text = Path(t.path).read_text()
    path = write(tmp_path, "shaped.log", fn(text))
    v = classify([TaskInput(path)], JobFacts(exit_code=1))
    assert v.cls == cls, (shape, v.detail)


# ---- the scan's time budget is a real bound ---------------------------------------------------

def test_budget_bounds_a_candidate_rich_log_and_still_reads_its_end(tmp_path):
    log = tmp_path / "big.log"
    # capitalised: grep's patterns are case-sensitive where the rules are, and every one of
    # these lines must reach Python (lower-case words are left out by grep, and fast)
    words = ["Error", "Timeout", "NCCL", "Memory", "Failed", "Killed"]
    with open(log, "w") as f:
        for i in range(300_000):
            f.write(f"step {i} worker {i % 89} {words[i % 6]} rate 0.{i % 97:02d} "
                    f"id={format(i * 2654435761 % (1 << 40), 'x')}\n")
        f.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    res = scan_file(str(log), load_rules(), budget_s=0.3)
    assert res.partial and "skipped" in res.partial
    assert res.events[-1].cls == "cuda_oom"


def test_labels_json_of_realworld_set_is_well_formed():
    root = Path(__file__).resolve().parent.parent / "corpus" / "realworld"
    labels = [json.loads(x) for x in (root / "labels.jsonl").read_text().splitlines()]
    assert len(labels) >= 100
    for lab in labels:
        assert lab["source"] in ("reproduced", "synthetic")
        assert lab["source"] != "synthetic" or lab["how"], lab["id"]
        for t in lab["tasks"]:
            assert (root / t["log"]).is_file(), lab["id"]


@pytest.mark.parametrize("text,cls", [
    ("epoch 3 train_loss: nan val_loss: nan\n", "nan_divergence"),
    ("loss: tensor(nan, device='cuda:0', grad_fn=<AddBackward0>)\n", "nan_divergence"),
    ("FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.\n",
     "nan_divergence"),
    ("tensorflow.python.framework.errors_impl.InternalError: Failed copying input tensor from "
     "/job:localhost/replica:0/task:0/device:CPU:0 to /job:localhost/replica:0/task:0/device:"
     "GPU:0 in order to run _EagerConst: Dst tensor is not initialized.\n", "cuda_oom"),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n",
     "host_oom"),
    ("RuntimeError: Socket Timeout\n", "collective_timeout"),
    ("zsh: segmentation fault  python train.py\n", "segfault"),
    ("slurmstepd: error: Exceeded job memory limit\nKilled\n", "host_oom"),
    # TensorFlow's CUDA library probe on a CPU node is a warning; the real error decides
    ("2023-01-01 10:00:00.1: W tensorflow/stream_executor/platform/default/dso_loader.cc:64] "
     "Could not load dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot "
     "open shared object file: No such file or directory\nKeyError: 'label'\n",
     "python_exception"),
])
def test_framework_wordings(tmp_path, text, cls):
    path = write(tmp_path, "0.0.log", LOSSES + text)
    assert classify([TaskInput(path)], JobFacts(exit_code=1)).cls == cls


def test_rules_own_literals_are_in_every_corpus_line_their_patterns_match():
    """A rule's `literals` replace the ones read off its patterns: a line its patterns match but
    that holds none of them would be skipped unseen. Checked on every line of the corpora."""
    from gpualert_slurm.classify.rules import norm_text
    from gpualert_slurm.classify.scan import clean_text

    rules = [r for r in load_rules().rules if r.own_literals]
    assert {r.id for r in rules} >= {"python_exception", "error_message", "warning_raised"}
    root = Path(__file__).resolve().parent.parent / "corpus"
    logs = [p for d in ("cases", "holdout/cases", "holdout2/cases", "realworld/cases")
            for p in (root / d).rglob("*.log")]
    assert len(logs) > 1000
    checked = 0
    for path in logs:
        for raw in path.read_bytes().replace(b"\r", b"\n").split(b"\n"):
            text = raw.decode("utf-8", "replace").rstrip()
            cleaned = clean_text(text)
            body = line_view(cleaned, cleaned=True).body.lstrip()
            pre = norm_text(cleaned) + "\n"
            for r in rules:
                if r.match(body):
                    checked += 1
                    assert any(lit in pre for lit in r.plits[0]), (r.id, str(path), text)
    assert checked > 500


def test_the_end_of_a_file_is_read_even_when_the_tail_runs_out_of_budget(tmp_path):
    log = tmp_path / "big.log"
    with open(log, "w") as f:
        for i in range(400_000):
            f.write(f"step {i} worker {i % 89} error rate 0.{i % 97:02d} "
                    f"id={format(i * 2654435761 % (1 << 40), 'x')}\n")
        f.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    res = scan_file(str(log), load_rules(), budget_s=0.0)
    assert res.events and res.events[-1].cls == "cuda_oom", res.partial
