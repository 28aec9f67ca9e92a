"""The corpus's targets (corpus/stats.py) and the log-shape transforms (corpus/gen/transforms.py).

No classifier here: counts, sources and shapes come from the labels alone.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus import stats  # noqa: E402
from corpus.gen import transforms  # noqa: E402

LOG = (b"epoch 1 step 10 loss 0.53\n"
       b"Traceback (most recent call last):\n"
       b'  File "/home/ana/proj/train.py", line 12, in <module>\n'
       b"    main()\n"
       b"FileNotFoundError: [Errno 2] No such file or directory: '/data/x.csv'\n"
       b"exiting\n")


def test_tuning_corpus_meets_targets():
    s = stats.stats(stats.load(ROOT / "corpus"))
    assert stats.problems(s) == []


def test_stats_script_prints_table_and_checks():
    p = subprocess.run([sys.executable, str(ROOT / "corpus" / "stats.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert "python_exception" in p.stdout and "cr_glue" in p.stdout
    assert p.returncode == 0, p.stdout[-2000:]


def test_problems_names_what_is_missing():
    labs = [{"class": "hang", "source": "synthetic", "transform": "crlf"}] * 3
    bad = stats.problems(stats.stats(labs))
    assert "hang: 3 cases < 40" in bad
    assert "hang: 0 really run < 25" in bad
    assert "shape crlf: in 1 classes < 8" in bad
    # GPU-only classes are held to the count but not to the really-run target
    assert not any(b.startswith("cuda_oom:") and "really run" in b for b in bad)


# holdout9 was written in 50 minutes, to a smaller size
@pytest.mark.parametrize("held_out,least", [(f"holdout{n}", 140) for n in range(3, 9)]
                         + [("holdout9", 120)])
def test_held_out_labels_are_well_formed(held_out: str, least: int):
    labs = stats.load(ROOT / "corpus" / held_out)
    assert len(labs) >= least
    assert {lab["class"] for lab in labs} == set(stats.CLASSES)
    for lab in labs:
        for t in lab["tasks"]:
            assert (ROOT / "corpus" / held_out / t["log"]).is_file(), lab["id"]
        if lab["source"] == "synthetic":
            assert lab["how"], lab["id"]


def test_crlf_and_prefixes_touch_every_line():
    out = transforms.apply("crlf", LOG, "s")
    assert out.count(b"\r\n") == LOG.count(b"\n") and b"\n" not in out.replace(b"\r\n", b"")
    for name, pat in [("rank_prefix", rb"^\[rank\d\]: "), ("torchrun_prefix", rb"^\[default\d\]:"),
                      ("srun_label", rb"^\d: "), ("quote", rb"^> ")]:
        lines = transforms.apply(name, LOG, "s").split(b"\n")[:-1]
        assert all(re.match(pat, ln) for ln in lines), name
        assert transforms.apply(name, LOG, "s").endswith(b"exiting\n")


def test_rank_naming_prefixes_use_the_tasks_own_rank_in_multi_rank_cases():
    tasks = [{"log": "cases/c/run.0.log", "rank": 0}, {"log": "cases/c/run.1.log", "rank": 1},
             {"log": "cases/c/batch.0.log", "rank": 0}]
    for name, fmt in [("rank_prefix", b"[rank%d]: "), ("torchrun_prefix", b"[default%d]:"),
                      ("srun_label", b"%d: ")]:
        for log, rank in [("run.0.log", 0), ("run.1.log", 1)]:
            # the same seed for both: only the rank can tell them apart
            out = transforms.apply(name, LOG, "c", transforms.case_rank(tasks, log))
            assert all(ln.startswith(fmt % rank) for ln in out.split(b"\n")[:-1]), (name, log)
    # a single-task case keeps a drawn rank (every rank appears somewhere in the corpus)
    assert transforms.case_rank(tasks[:1], "run.0.log") is None


def test_cr_glue_puts_the_failure_on_the_bar_line():
    out = transforms.apply("cr_glue", LOG, "seed1")
    line = [ln for ln in out.split(b"\n") if b"Traceback" in ln][0]
    assert line.startswith(b"\r") and b"%|" in line
    assert line.endswith(b"Traceback (most recent call last):")


def test_truncate_keeps_the_failure_line_and_cuts_after_it():
    out = transforms.apply("truncate", LOG, "s")
    assert b"FileNotFoundError" in out and out.startswith(LOG[:40])
    assert len(out) < len(LOG) and not out.endswith(b"exiting\n")


def test_windows_rewrites_posix_paths():
    out = transforms.apply("windows", LOG, "s")
    assert b"/home/ana" not in out and b"\\proj\\train.py" in out and b":\\" in out


def test_markdown_fences_and_bolds_the_failure():
    out = transforms.apply("markdown", LOG, "s")
    assert out.count(b"```") == 2 and b"**" in out
    assert b"FileNotFoundError" in out


def test_transforms_are_deterministic_per_seed():
    spec = "+".join(transforms.SHAPES)
    assert transforms.apply(spec, LOG, "a") == transforms.apply(spec, LOG, "a")
    assert random.Random("a").random() != random.Random("b").random()


def test_variant_labels_record_shape_and_base():
    labs = [json.loads(x) for x in (ROOT / "corpus" / "labels.jsonl").read_text().splitlines()
            if x.strip()]
    by_id = {lab["id"]: lab for lab in labs}
    variants = [lab for lab in labs if lab.get("transform")]
    assert len(variants) >= 300
    for v in variants[:50]:
        base_id = v["how"].split("shape variant of ")[1].split(":")[0]
        base = by_id[base_id]
        assert v["class"] == base["class"] and v["source"] == base["source"]
        assert len(v["tasks"]) == len(base["tasks"])


def test_check_files_names_missing_logs_and_stray_dirs(tmp_path):
    (tmp_path / "cases" / "a").mkdir(parents=True)
    (tmp_path / "cases" / "stray").mkdir()
    (tmp_path / "cases" / "a" / "run.0.log").write_text("x\n")
    task = {"log": "cases/a/run.0.log", "rank": 0, "node": None, "step": "run",
            "exit_code": 1, "signal": None, "core_dumped": False, "end_time": 1.0}
    lab = dict.fromkeys(stats.FIELDS)
    lab.update(id="a", tasks=[task])
    gone = dict(lab, id="b", tasks=[dict(task, log="cases/b/run.0.log")])
    bad = stats.check_files(tmp_path, [lab, gone])
    assert any(b.startswith("b: bad task entry") for b in bad)
    assert "stray: directory without a label" in bad
    assert not any(b.startswith("a:") for b in bad)
