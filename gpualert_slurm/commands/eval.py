"""`gpualert eval CORPUS_DIR`: score the classifier on a labelled corpus, beside two baselines.

Each case is classified from exactly the label's facts (docs/CLASSIFY-API.md). Baselines, run on
the same cases: (a) exit status only (exit code, signal, Slurm state); (b) unordered keyword
matching (classify/baseline_keywords.yaml: the first keyword of the list found anywhere in the
logs decides). Scores are reported for all cases and for the cases that are not synthetic.
Macro-F1 averages over the classes that occur in the labels of the scored cases.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpualert_slurm.classify import JobFacts, RuleError, TaskInput, classify, load_rules

KEYWORD_READ_CAP = 64 << 20  # baseline (b) greps at most this much of each log


class CorpusError(Exception):
    pass


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, object) for each non-blank line of a JSON-lines file; CorpusError names
    the file and line that cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CorpusError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except ValueError as e:
            raise CorpusError(f"{path}:{n}: not valid JSON: {e}") from None
    return out


def load_labels(corpus: Path) -> list[dict]:
    path = corpus / "labels.jsonl"
    labels = []
    for n, obj in _json_lines(path):
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), str) \
                or not isinstance(obj.get("class"), str):
            raise CorpusError(f"{path}:{n}: a label needs at least string fields id and class")
        if not isinstance(obj.get("tasks", []), list):
            raise CorpusError(f"{path}:{n}: field tasks must be a list")
        labels.append(obj)
    if not labels:
        raise CorpusError(f"{path}: no labels")
    return labels


def load_peer(corpus: Path) -> tuple[list[dict], dict[str, str]]:
    """A peer project's corpus (mapping.yaml beside its labels.jsonl): its labels in our format
    and the classes its labels cannot tell apart (prediction -> the class it counts as).

    Peer labels: id, mode (their label), source, log_path (relative to a folder "corpus/" that
    is the corpus dir), true_exit_code (negative: killed by that signal).
    """
    mpath = corpus / "mapping.yaml"
    try:
        mapping = yaml.safe_load(mpath.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise CorpusError(f"cannot read {mpath}: {e}") from None
    classes = mapping.get("classes") if isinstance(mapping, dict) else None
    if not isinstance(classes, dict):
        raise CorpusError(f"{mpath}: field 'classes' must map the peer's labels to our classes")
    same = mapping.get("same_on_this_set") or {}
    path = corpus / "labels.jsonl"
    labels = []
    for n, obj in _json_lines(path):
        mode, rel = obj.get("mode"), obj.get("log_path")
        if mode not in classes or not isinstance(rel, str):
            raise CorpusError(f"{path}:{n}: label {mode!r} is not in {mpath.name} "
                              "or log_path is missing")
        code = _int(obj.get("true_exit_code"))
        rel = rel.removeprefix("corpus/")
        labels.append({
            "id": str(obj.get("id")), "class": str(classes[mode]), "root_rank": None,
            "source": "synthetic" if obj.get("source") == "synthetic" else "reproduced",
            "exit_code": code if code is None or code >= 0 else None,
            "signal": -code if code is not None and code < 0 else None,
            "tasks": [{"log": rel}],
        })
    if not labels:
        raise CorpusError(f"{path}: no labels")
    return labels, {str(k): str(v) for k, v in same.items()}


def load_pasted(corpus: Path) -> list[dict]:
    """A set of real logs as people pasted them (labels.csv: id, class, source, note; the log of
    case `id` is logs/<id>.log). A pasted excerpt carries no exit status, Slurm state or rank:
    the classifier gets the log alone and the one fact every poster knows, whether the job
    failed (exit status unknown) or succeeded (exit 0)."""
    import csv

    path = corpus / "labels.csv"
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CorpusError(f"cannot read {path}: {e}") from None
    labels = []
    for n, row in enumerate(rows, 2):
        cid, cls = (row.get("id") or "").strip(), (row.get("class") or "").strip()
        if not cid or not cls:
            raise CorpusError(f"{path}:{n}: a row needs an id and a class")
        labels.append({"id": cid, "class": cls, "root_rank": None, "source": "pasted",
                       "exit_code": 0 if cls == "success" else None,
                       "tasks": [{"log": f"logs/{cid}.log"}]})
    if not labels:
        raise CorpusError(f"{path}: no labels")
    return labels


def _resolve(corpus: Path, case_id: str, rel: str) -> str:
    """A label path is relative to the corpus dir; a bare name may be relative to its case dir."""
    p = Path(rel)
    if p.is_absolute():
        return str(p)
    for cand in (corpus / p, corpus / "cases" / case_id / p):
        if cand.exists():
            return str(cand)
    return str(corpus / p)


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def case_inputs(corpus: Path, label: dict) -> tuple[list[TaskInput], JobFacts]:
    tasks = []
    for t in label.get("tasks") or []:
        if not isinstance(t, dict) or not isinstance(t.get("log"), str):
            continue
        tasks.append(TaskInput(
            path=_resolve(corpus, label["id"], t["log"]),
            rank=_int(t.get("rank")),
            node=t.get("node") if isinstance(t.get("node"), str) else None,
            step=str(t["step"]) if t.get("step") is not None else None,
            exit_code=_int(t.get("exit_code")),
            signal=_int(t.get("signal")),
            core_dumped=bool(t.get("core_dumped")),
            end_time=_num(t.get("end_time")),
        ))
    kl = label.get("kernel_log")
    job = JobFacts(
        exit_code=_int(label.get("exit_code")),
        signal=_int(label.get("signal")),
        slurm_state=label.get("slurm_state") if isinstance(label.get("slurm_state"), str) else None,
        slurm_reason=label.get("slurm_reason")
        if isinstance(label.get("slurm_reason"), str) else None,
        kernel_log=_resolve(corpus, label["id"], kl) if isinstance(kl, str) else None,
        hang_threshold_s=_num(label.get("hang_threshold_s")),
        silence_s=_num(label.get("silence_s")),
    )
    return tasks, job


# ---- baselines ----

_EXIT_STATES = {"TIMEOUT": "time_limit", "PREEMPTED": "preempted", "CANCELLED": "cancelled",
                "NODE_FAIL": "node_failure", "OUT_OF_MEMORY": "host_oom"}


def baseline_exit(tasks: list[TaskInput], job: JobFacts) -> str:
    state = (job.slurm_state or "").upper().split(" ")[0]
    if state in _EXIT_STATES:
        return _EXIT_STATES[state]
    sig = job.signal or next((t.signal for t in tasks if t.signal), None)
    if sig is None and job.exit_code is not None and 128 < job.exit_code <= 128 + 64:
        sig = job.exit_code - 128
    if sig == 9:
        return "killed"
    if sig == 11:
        return "segfault"
    if job.exit_code == 0 and not sig:
        return "success"
    return "unknown"


def _keywords() -> list[tuple[str, str]]:
    text = resources.files("gpualert_slurm.classify").joinpath("baseline_keywords.yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(text.read_text(), Loader=loader)
    return [(str(k).lower(), str(c)) for k, c in data["keywords"]]


def baseline_keywords(tasks: list[TaskInput], job: JobFacts, kws: list[tuple[str, str]]) -> str:
    text = []
    for t in tasks:
        try:
            with open(t.path, "rb") as f:
                text.append(f.read(KEYWORD_READ_CAP).decode("utf-8", "replace").lower())
        except OSError:
            pass
    whole = "\n".join(text)
    for kw, cls in kws:
        if kw in whole:
            return cls
    return "success" if job.exit_code == 0 else "unknown"


# ---- scoring ----

def score(truth: list[str], pred: list[str]) -> dict[str, Any]:
    classes = sorted(set(truth) | set(pred))
    per: dict[str, dict[str, float]] = {}
    for c in classes:
        tp = sum(1 for t, p in zip(truth, pred, strict=True) if t == c and p == c)
        fp = sum(1 for t, p in zip(truth, pred, strict=True) if t != c and p == c)
        fn = sum(1 for t, p in zip(truth, pred, strict=True) if t == c and p != c)
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per[c] = {"precision": prec, "recall": rec, "f1": f1, "support": tp + fn}
    in_truth = sorted(set(truth))
    macro = sum(per[c]["f1"] for c in in_truth) / len(in_truth) if in_truth else 0.0
    acc = sum(1 for t, p in zip(truth, pred, strict=True) if t == p) / len(truth) if truth else 0.0
    confusion = Counter(zip(truth, pred, strict=True))
    return {"n": len(truth), "accuracy": acc, "macro_f1": macro, "per_class": per,
            "confusion": {f"{t} -> {p}": n for (t, p), n in sorted(confusion.items())}}


def evaluate(corpus: Path, include_synthetic: bool = True) -> dict[str, Any]:
    """Score a corpus; a dir with mapping.yaml is a peer's corpus (see load_peer), one with
    labels.csv and no labels.jsonl a set of pasted real logs (see load_pasted)."""
    same: dict[str, str] = {}
    if (corpus / "mapping.yaml").is_file():
        labels, same = load_peer(corpus)
    elif (corpus / "labels.csv").is_file() and not (corpus / "labels.jsonl").exists():
        labels = load_pasted(corpus)
    else:
        labels = load_labels(corpus)
    rules = load_rules()
    kws = _keywords()
    rows = []
    for lab in labels:
        tasks, job = case_inputs(corpus, lab)
        missing = [t.path for t in tasks if not Path(t.path).is_file()]
        v = classify(tasks, job, rules)
        rows.append({
            "id": lab["id"], "truth": lab["class"], "source": lab.get("source", "reproduced"),
            "ours": same.get(v.cls, v.cls),
            "exit_only": same.get(c := baseline_exit(tasks, job), c),
            "keywords": same.get(c := baseline_keywords(tasks, job, kws), c),
            "root_truth": _int(lab.get("root_rank")), "root_ours": v.root_rank,
            "missing": missing,
        })
    sections = {}
    subsets = [("all cases", rows), ("without synthetic", [r for r in rows
                                                          if r["source"] != "synthetic"])]
    if not include_synthetic:
        subsets = subsets[1:]
    for name, sub in subsets:
        if not sub:  # e.g. no case of an all-composed set is left "without synthetic"
            continue
        truth = [r["truth"] for r in sub]
        sec = {m: score(truth, [r[m] for r in sub]) for m in ("ours", "exit_only", "keywords")}
        ranked = [r for r in sub if r["root_truth"] is not None]
        sec["root_rank"] = {
            "n": len(ranked),
            "accuracy": (sum(1 for r in ranked if r["root_ours"] == r["root_truth"]) / len(ranked)
                         if ranked else None),
        }
        sections[name] = sec
    return {"corpus": str(corpus), "cases": rows, "sections": sections,
            "same_on_this_set": same}


def _fmt(x: float | None) -> str:
    return "  -  " if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:5.2f}"


def render(rep: dict[str, Any]) -> str:
    out = [f"corpus {rep['corpus']}: {len(rep['cases'])} cases"]
    if rep.get("same_on_this_set"):
        out.append("scored as equal on this set (its labels cannot tell them apart): "
                   + ", ".join(f"{a} = {b}" for a, b in rep["same_on_this_set"].items()))
    miss = [r for r in rep["cases"] if r["missing"]]
    if miss:
        out.append(f"warning: {len(miss)} case(s) with missing log files, e.g. "
                   f"{miss[0]['id']}: {miss[0]['missing'][0]}")
    for name, sec in rep["sections"].items():
        ours, ex, kw = sec["ours"], sec["exit_only"], sec["keywords"]
        out += ["", f"== {name} ({ours['n']} cases)", "",
                f"{'':22}{'gpualert':>20}{'exit-code only':>20}{'keywords':>20}",
                f"{'macro-F1':22}{_fmt(ours['macro_f1']):>20}{_fmt(ex['macro_f1']):>20}"
                f"{_fmt(kw['macro_f1']):>20}",
                f"{'accuracy':22}{_fmt(ours['accuracy']):>20}{_fmt(ex['accuracy']):>20}"
                f"{_fmt(kw['accuracy']):>20}",
                f"{'root-rank accuracy':22}{_fmt(sec['root_rank']['accuracy']):>20}"
                f"   (on {sec['root_rank']['n']} cases with a labelled root rank)",
                "", f"{'class':22}{'n':>4}  {'P / R / F1 (gpualert)':>22}"
                    f"  {'F1 exit-only':>12}  {'F1 keywords':>11}"]
        for c, m in sorted(ours["per_class"].items()):
            out.append(f"{c:22}{m['support']:>4}  {_fmt(m['precision'])} /{_fmt(m['recall'])} /"
                       f"{_fmt(m['f1'])}  {_fmt(ex['per_class'].get(c, {}).get('f1', 0.0)):>12}"
                       f"  {_fmt(kw['per_class'].get(c, {}).get('f1', 0.0)):>11}")
        out += ["", "confusion (gpualert; label -> predicted, errors only):"]
        errs = {k: n for k, n in ours["confusion"].items()
                if k.split(" -> ")[0] != k.split(" -> ")[1]}
        out += [f"  {k}: {n}" for k, n in errs.items()] or ["  (none)"]
        out += ["", "confusion matrix (gpualert; rows label, cols predicted, non-zero only):"]
        out += _matrix(ours["confusion"])
    return "\n".join(out)


def _matrix(conf: dict[str, int]) -> list[str]:
    """Rows: labels; columns: predictions, numbered (the row with that number names it)."""
    pairs = {tuple(k.split(" -> ")): n for k, n in conf.items()}
    names = sorted({t for t, _ in pairs} | {p for _, p in pairs})
    rows = [c for c in names if any(t == c for t, _ in pairs)]
    cols = [c for c in names if any(p == c for _, p in pairs)]
    num = {c: i + 1 for i, c in enumerate(names)}
    w = max(len(r) for r in names) + 5
    head = "label / predicted"
    lines = [f"{head:<{w}}" + "".join(f"{num[c]:>5}" for c in cols)]
    for r in rows:
        cells = "".join(f"{(pairs.get((r, c)) or '.'):>5}" for c in cols)
        lines.append(f"{num[r]:>2} {r:<{w - 3}}{cells}")
    extra = [c for c in cols if c not in rows]
    if extra:
        lines.append("   (predicted only: " + ", ".join(f"{num[c]} {c}" for c in extra) + ")")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpualert eval", description=__doc__.splitlines()[0])
    ap.add_argument("corpus", metavar="CORPUS_DIR")
    ap.add_argument("--json", action="store_true", help="print the full report as JSON")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--include-synthetic", dest="synthetic", action="store_true", default=True,
                   help="report all cases and the non-synthetic ones (default)")
    g.add_argument("--exclude-synthetic", dest="synthetic", action="store_false",
                   help="report only the cases that are not synthetic")
    args = ap.parse_args(argv)
    corpus = Path(args.corpus)
    if not corpus.is_dir():
        print(f"gpualert eval: {corpus} is not a directory", file=sys.stderr)
        return 2
    try:
        rep = evaluate(corpus, include_synthetic=args.synthetic)
    except CorpusError as e:
        print(f"gpualert eval: {e}", file=sys.stderr)
        return 2
    except RuleError as e:
        print(f"gpualert eval: bad rule file: {e}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(rep, indent=1) if args.json else render(rep), flush=True)
    except BrokenPipeError:  # `| head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
