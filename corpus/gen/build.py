#!/usr/bin/env python3
"""Build a corpus set from its data file: `build.py SET [--only PREFIX ...] [--jobs N]`.

`sets/SET.yaml` names the set's directory (under corpus/), the native programs it compiles
(`native:`), set-wide fixtures (`prepare:`), and lists its cases. Kinds:
- run (default): real commands captured as the tap does (runner.py lists the fields: what
  runs, the conditions that make it fail, the checks), then the shape `transform` applied;
- slurm: a batch script submitted to the test cluster with --gpualert, task logs and exit
  records copied from the spool, the end state from sacct (slurmjobs.py lists the fields);
- synthetic: a GPU-class log composed from documented formats (`synth`, `params`);
- variant: an existing case of the set with a shape `transform` applied to its logs (`base`).
An entry with `each:` is a family of numbered cases that differ only by their number, one with
`shapes:` the shape variants of cases of one class, one with `group:` cases that share fields
(`expand`).
A really-run case whose run did not end as `expect` says (fail / ok / signal) is dropped and
reported, never relabelled. labels.jsonl is rewritten sorted by id, keeping cases not rebuilt.
Runs as root (tmpfs mounts, setpriv, sbatch as the test user).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from corpus.gen import compose, runner, slurmjobs, transforms  # noqa: E402

GEN = Path(__file__).resolve().parent
CORPUS = GEN.parent
REPO = CORPUS.parent
PROGS = GEN / "progs"

def load_set(name: str) -> dict:
    data = yaml.safe_load((GEN / "sets" / f"{name}.yaml").read_text())
    data.setdefault("defaults", {})
    data["cases"] = [c for entry in data["cases"] for c in expand(entry)]
    return data


_NUM = re.compile(r"<i(?::(\d+))?>")


def _member(v: object, i: int, cid: str) -> object:
    """A family entry's value for its member i (id `cid`)."""
    if isinstance(v, dict):
        return {k: _member(x, i, cid) for k, x in v.items()}
    if isinstance(v, list):
        return [_member(x, i, cid) for x in v]
    if v == "<i:int>":
        return i
    if isinstance(v, str):
        return _NUM.sub(lambda m: format(i, m.group(1) or ""), v.replace("<id>", cid))
    return v


def expand(entry: dict) -> list[dict]:
    """A set file's entry as cases: itself, or, with `each` (numbers, or "A..B"), a family of
    cases, one a number i: `<i>` in its texts is i (`<i:02>` zero-padded), `<id>` the case's
    id, and a value `<i:int>` the number i; or, with `shapes` ({transform: base case}), the
    shape variants `shape-<transform>-<base>` of cases of the entry's class; or, with `group`
    (fields) and `cases`, those cases with the group's fields."""
    if "group" in entry:  # cases that share fields: the group's, then each case's own
        return [{"id": c["id"], **entry["group"], **c} for sub in entry["cases"]
                for c in expand(sub)]
    if "shapes" in entry:  # shape variants of cases of one class: {transform: base case}
        return [{"id": f"shape-{tr.split('+')[0].replace('_', '-')}-{base}",
                 "class": entry["class"], "kind": "variant", "base": base, "transform": tr}
                for tr, base in entry["shapes"].items()]
    if "each" not in entry:
        return [entry]
    each = entry["each"]
    if isinstance(each, str):
        first, last = each.split("..")
        each = range(int(first), int(last) + 1)
    out = []
    for i in each:
        cid = _member(entry["id"], i, "")
        out.append({k: cid if k == "id" else _member(v, i, cid)
                    for k, v in entry.items() if k != "each"})
    return out


def case_dir(root: Path, cid: str) -> Path:
    d = root / "cases" / cid
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def fill(text: str, py: str, tmp: str) -> str:
    return runner.fill(text, {"PY": py, "PROGS": str(PROGS), "TMP": tmp})


def build_native(spec: dict) -> Path | None:
    """Compile the set's native programs (`native:` lines, run in {NATIVE}) once per build."""
    if not spec.get("native"):
        return None
    out = Path(tempfile.mkdtemp(prefix="corpus-native-"))
    subs = {"NATIVE": str(out), "SRC": str(PROGS / "native")}
    for line in spec["native"]:
        subprocess.run(["bash", "-c", runner.fill(line, subs)], cwd=out, check=True)
    os.chmod(out, 0o755)
    return out


def variant_case(root: Path, c: dict, base_labels: dict[str, dict]) -> dict | None:
    """A shape variant: a copy of an existing case of the set whose logs get `transform`.

    The run stays what it was (its source too); the label records the transform and the base."""
    base = base_labels.get(c["base"])
    if base is None:
        print(f"DROP {c['id']}: base case {c['base']} not in the set", file=sys.stderr)
        return None
    src = root / "cases" / c["base"]
    if not base["tasks"] or not src.is_dir():
        print(f"DROP {c['id']}: base case {c['base']} has no logs", file=sys.stderr)
        return None
    d = case_dir(root, c["id"])
    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        if f.suffix == ".log" and f.name != "kernel.log":
            data = transforms.apply(c["transform"], data, f"{c['id']}/{f.name}",
                                    transforms.case_rank(base["tasks"], f.name))
        (d / f.name).write_bytes(data)
    lab = json.loads(json.dumps(base))
    lab["id"] = c["id"]
    for t in lab["tasks"]:
        t["log"] = t["log"].replace(f"cases/{c['base']}/", f"cases/{c['id']}/", 1)
    if lab.get("kernel_log"):
        lab["kernel_log"] = lab["kernel_log"].replace(f"cases/{c['base']}/", f"cases/{c['id']}/")
    lab["transform"] = c["transform"]
    lab["how"] = (lab.get("how") + "; " if lab.get("how") else "") + \
        f"shape variant of {c['base']}: {c['transform']} applied to its logs"
    return lab


def synth_case(root: Path, c: dict) -> dict:
    return compose.build(root, case_dir(root, c["id"]), c)


# ---------------------------------------------------------------- driver

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("set")
    ap.add_argument("--only", nargs="*", default=[], help="case id prefixes to rebuild")
    ap.add_argument("--kind", choices=["run", "slurm", "synthetic", "variant"], action="append")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--python", help="the interpreter the cases run with (default: the set's)")
    ap.add_argument("--out", help="build into this directory instead of the set's own (to "
                    "compare a rebuild with the kept cases)")
    ap.add_argument("--recollect", nargs="*", default=[], metavar="CASE:JOBID",
                    help="label Slurm cases from jobs that already ran (spool still there)")
    a = ap.parse_args()
    spec = load_set(a.set)
    root = Path(a.out).resolve() if a.out else CORPUS / spec["dir"]
    py = a.python or spec.get("python", "/opt/gpualert-corpus-venv/bin/python")
    cases = [dict(spec["defaults"], **c) for c in spec["cases"]]
    cases = [c for c in cases if not a.only or any(c["id"].startswith(p) for p in a.only)]
    cases = [c for c in cases if not a.kind or c.get("kind", "run") in a.kind]
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        sys.exit("build: duplicate case ids in the set")
    (GEN / "build").mkdir(exist_ok=True)
    labels: list[dict] = []
    if a.recollect:
        by_id = {c["id"]: c for c in cases}
        pairs = [x.split(":") for x in a.recollect]
        labels += [lab for cid, jid in pairs if (lab := slurmjobs.collect(
            root, spec["dir"].replace("/", "-"), by_id[cid], int(jid), case_dir))]
        cases = [by_id[cid] for cid, _ in pairs]
        ids = [c["id"] for c in cases]
    runs = [c for c in cases if c.get("kind", "run") == "run" and not a.recollect]
    native = build_native(spec) if runs else None
    subs = {"PY": py, "PROGS": str(PROGS), "NATIVE": str(native or "")}
    for line in spec.get("prepare", []) if runs else []:  # set-wide fixtures, made once
        subprocess.run(["bash", "-c", runner.fill(line, subs)], check=True)
    try:
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            for lab in pool.map(lambda c: runner.run_case(root, c, subs), runs):
                if lab:
                    labels.append(lab)
    finally:
        if native:
            shutil.rmtree(native, ignore_errors=True)
    labels += [synth_case(root, c) for c in cases if c.get("kind") == "synthetic"]
    slurm = [c for c in cases if c.get("kind") == "slurm" and not a.recollect]
    if slurm:
        labels += slurmjobs.run(root, spec["dir"].replace("/", "-").replace(".", "corpus"), slurm,
                                lambda text, wd: fill(text, py, wd), case_dir)
    variants = [c for c in cases if c.get("kind") == "variant"]
    if variants:  # last: they are made from the cases (re)built above
        lf = root / "labels.jsonl"
        base_labels = {(x := json.loads(line))["id"]: x for line in lf.read_text().splitlines()
                       if line.strip()} if lf.exists() else {}
        base_labels.update({lab["id"]: lab for lab in labels})  # built in this run
        labels += [lab for c in variants if (lab := variant_case(root, c, base_labels))]
    lf = root / "labels.jsonl"
    old = {}
    if lf.exists():
        old = {json.loads(x)["id"]: x for x in lf.read_text().splitlines() if x.strip()}
    for cid in ids:
        old.pop(cid, None)
    old.update({lab["id"]: json.dumps(lab) for lab in labels})
    lf.write_text("".join(v + "\n" for _, v in sorted(old.items())))
    print(f"build {a.set}: {len(labels)}/{len(cases)} cases built, {len(old)} in {lf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
