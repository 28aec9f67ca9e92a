"""GPUAlert's published corpus (../shared/peer-corpus, beside the clone, read-only), scored with
our classes through its mapping.yaml: macro-F1 >= 0.99. Pure logic, no cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpualert_slurm.commands.eval import CorpusError, evaluate, load_peer

REPO = Path(__file__).resolve().parent.parent
PEER = REPO.parent / "shared" / "peer-corpus"


def test_peer_corpus_macro_f1_at_least_0_99() -> None:
    assert (PEER / "mapping.yaml").is_file(), (
        f"peer corpus not found at {PEER}: CI needs ../shared/peer-corpus beside the clone")
    rep = evaluate(PEER)
    ours = rep["sections"]["all cases"]["ours"]
    assert ours["n"] == 474
    misses = [(r["id"], r["truth"], r["ours"]) for r in rep["cases"] if r["truth"] != r["ours"]]
    assert ours["macro_f1"] >= 0.99, misses[:20]


def _peer(root: Path, rows: list[tuple[str, str, int]]) -> Path:
    (root / "logs").mkdir(parents=True)
    (root / "mapping.yaml").write_text(
        "classes: {nccl: nccl_error, oom: cuda_oom, nan: nan_divergence}\n"
        "same_on_this_set: {collective_timeout: nccl_error}\n")
    labels = []
    for i, (mode, text, code) in enumerate(rows):
        (root / "logs" / f"{i}.log").write_text(text)
        labels.append({"id": f"c{i}", "mode": mode, "source": "injected",
                       "log_path": f"corpus/logs/{i}.log", "true_exit_code": code})
    (root / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    return root


def test_peer_mapping_equal_classes_and_signals(tmp_path: Path) -> None:
    root = _peer(tmp_path / "p", [
        ("nccl", "[E ProcessGroupNCCL.cpp:123] Watchdog caught collective operation timeout\n", 1),
        ("oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n", -9),
        ("nan", "step 1 | loss = 2.0\nstep 2 | loss = nan\nNaN detected in loss, aborting.\n", 0),
    ])
    labels, same = load_peer(root)
    assert same == {"collective_timeout": "nccl_error"}
    # a negative exit status is the signal that killed the process
    assert (labels[1]["exit_code"], labels[1]["signal"]) == (None, 9)
    assert (labels[2]["exit_code"], labels[2]["signal"]) == (0, None)
    rep = evaluate(root)
    got = {r["id"]: r["ours"] for r in rep["cases"]}
    # the watchdog timeout is our collective_timeout, counted as nccl_error on this set only
    assert got == {"c0": "nccl_error", "c1": "cuda_oom", "c2": "nan_divergence"}


def test_peer_label_not_in_mapping_is_an_error(tmp_path: Path) -> None:
    root = _peer(tmp_path / "p", [("segv", "Segmentation fault\n", -11)])
    with pytest.raises(CorpusError, match="not in mapping.yaml"):
        load_peer(root)
