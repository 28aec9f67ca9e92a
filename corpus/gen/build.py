#!/usr/bin/env python3
"""Build a corpus set from its data file: `build.py SET [--only PREFIX ...] [--jobs N]`.

`sets/SET.yaml` names the set's directory (under corpus/), the native programs it compiles
(`native:`), set-wide fixtures (`prepare:`), and lists its cases. Kinds:
- run (default): real commands captured as the tap does (runner.py lists the fields: what
  runs, the conditions that make it fail, the checks), then the shape `transform` applied;
- slurm: a batch script submitted to the test cluster with --gpualert, task logs and exit
  records copied from the spool, the end state from sacct (`script`, `sbatch`, `want`,
  `cancel_after`, `preempt`);
- synthetic: a GPU-class log composed from documented formats (`synth`, `params`);
- variant: an existing case of the set with a shape `transform` applied to its logs (`base`).
A really-run case whose run did not end as `expect` says (fail / ok / signal) is dropped and
reported, never relabelled. labels.jsonl is rewritten sorted by id, keeping cases not rebuilt.
Runs as root (tmpfs mounts, setpriv, sbatch as the test user).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from corpus.gen import capture, runner, synthetic, transforms  # noqa: E402

GEN = Path(__file__).resolve().parent
CORPUS = GEN.parent
REPO = CORPUS.parent
PROGS = GEN / "progs"
CLUSTER = Path("/var/lib/gpualert-cluster")

def load_set(name: str) -> dict:
    data = yaml.safe_load((GEN / "sets" / f"{name}.yaml").read_text())
    data.setdefault("defaults", {})
    return data


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
            data = transforms.apply(c["transform"], data, f"{c['id']}/{f.name}")
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
    d = case_dir(root, c["id"])
    return synthetic.build(root, d, c)


# ---------------------------------------------------------------- Slurm

def _slurm_env() -> dict:
    return dict(os.environ, SLURM_CONF=str(CLUSTER / "etc/slurm.conf"))


def _sacct(jid: int) -> tuple[str, str, str]:
    out = subprocess.run(["sacct", "-X", "-P", "-n", "-o", "State,ExitCode,Reason", "-j",
                          str(jid)], env=_slurm_env(), capture_output=True, text=True).stdout
    line = out.strip().splitlines()[0] if out.strip() else ""
    s, ec, reason = (line.split("|") + ["", "", ""])[:3]
    return s, ec, reason


def _submit(setname: str, c: dict, py: str) -> int:
    wd = CLUSTER / "work" / f"{setname}-{c['id']}"
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    (wd / "job.sbatch").write_text(fill(c["script"], py, str(wd)))
    for f in PROGS.glob("*.py"):
        shutil.copy(f, wd / f.name)
    for f in [wd, *wd.iterdir()]:
        shutil.chown(f, "gpatest", "gpatest")
    out = subprocess.run(["runuser", "-u", "gpatest", "--", "sbatch", "--parsable", "--gpualert",
                          "--no-requeue", "-J", c["id"], "-o", "slurm-%j.out",
                          *shlex.split(c.get("sbatch", "")), "job.sbatch"],
                         cwd=wd, env=_slurm_env(), check=True, capture_output=True,
                         text=True).stdout
    return int(out.strip().split(";")[0])


def _collect(root: Path, c: dict, jid: int) -> dict | None:
    time.sleep(2)  # let the epilog finish writing
    st, ec, reason = _sacct(jid)
    if st.split(" ")[0] != c["want"]:
        print(f"DROP {c['id']}: job {jid} ended {st} {ec} {reason}, wanted {c['want']}",
              file=sys.stderr)
        return None
    spool = CLUSTER / "spool" / str(jid) / "tasks"
    d = case_dir(root, c["id"])
    tasks = []
    last_out = max((lg.stat().st_mtime for lg in spool.rglob("*.log")), default=None)
    for lg in sorted(spool.rglob("*.log")):
        shutil.copy(lg, d / lg.name)
        step, rank = lg.name[:-4].rsplit(".", 1)
        rec: dict = {}
        ex = lg.with_suffix(".exit")
        if ex.exists():
            shutil.copy(ex, d / ex.name)
            rec = json.loads(ex.read_text())
        tasks.append({"log": str((d / lg.name).relative_to(root)), "rank": int(rank),
                      "node": rec.get("node"), "step": step, "exit_code": rec.get("exit_code"),
                      "signal": rec.get("signal"), "core_dumped": bool(rec.get("core_dumped")),
                      "end_time": rec.get("end_time")})
    if not tasks:
        print(f"DROP {c['id']}: no task logs in {spool}", file=sys.stderr)
        shutil.rmtree(d)
        return None
    code, sig = (int(x) for x in ec.split(":"))
    silence = None
    ends = [t["end_time"] for t in tasks if t["end_time"]]
    if c.get("hang_threshold_s") is not None and ends and last_out:
        silence = round(max(ends) - last_out, 3)
    extra = f"; scancel after {c['cancel_after']}s" if c.get("cancel_after") else ""
    if c.get("preempt"):
        extra += "; preempted by an exclusive urgent job on its node"
    return capture.label(
        c["id"], c["class"], tasks, command=f"sbatch --gpualert {c.get('sbatch', '')} "
        f"<script in sets/*.yaml>{extra}", root_rank=c.get("root_rank"), exit_code=code,
        signal_=sig or None, slurm_state=st.split(" ")[0],
        slurm_reason=None if reason in ("", "None") else reason,
        hang_threshold_s=c.get("hang_threshold_s"), silence_s=silence)


def slurm_cases(root: Path, setname: str, cases: list[dict], py: str) -> list[dict]:
    env = _slurm_env()
    jids: dict[str, int] = {}
    pre = [c for c in cases if c.get("preempt")]
    for c in pre:
        jids[c["id"]] = _submit(setname, c, py)
    if pre:
        t0 = time.time()
        while time.time() - t0 < 60 and any(_sacct(jids[c["id"]])[0] != "RUNNING" for c in pre):
            time.sleep(1)
        time.sleep(8)  # the victims write some output first
        for node in sorted({c["preempt"] for c in pre}):
            subprocess.run(["runuser", "-u", "gpatest", "--", "sbatch", "-p", "urgent", "-w",
                            node, "--exclusive", "-o", "/dev/null", "--wrap", "sleep 5"],
                           cwd="/tmp", env=env, check=True, capture_output=True)
    rest = [c for c in cases if not c.get("preempt")]
    for c in rest:
        jids[c["id"]] = _submit(setname, c, py)
    t0 = time.time()
    for c in sorted((c for c in rest if c.get("cancel_after")), key=lambda c: c["cancel_after"]):
        time.sleep(max(0.0, t0 + c["cancel_after"] - time.time()))
        subprocess.run(["runuser", "-u", "gpatest", "--", "scancel", str(jids[c["id"]])],
                       env=env, check=True)
    t0 = time.time()
    while time.time() - t0 < 400:
        if all(_sacct(j)[0].split(" ")[0] not in ("", "PENDING", "RUNNING", "COMPLETING")
               for j in jids.values()):
            break
        time.sleep(3)
    return [lab for c in cases if (lab := _collect(root, c, jids[c["id"]]))]


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
        labels += [lab for cid, jid in pairs if (lab := _collect(root, by_id[cid], int(jid)))]
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
    variants = [c for c in cases if c.get("kind") == "variant"]
    if variants:
        lf = root / "labels.jsonl"
        base_labels = {(x := json.loads(line))["id"]: x for line in lf.read_text().splitlines()
                       if line.strip()} if lf.exists() else {}
        base_labels.update({lab["id"]: lab for lab in labels})  # built in this run
        labels += [lab for c in variants if (lab := variant_case(root, c, base_labels))]
    slurm = [c for c in cases if c.get("kind") == "slurm" and not a.recollect]
    if slurm:
        labels += slurm_cases(root, spec["dir"].replace("/", "-"), slurm, py)
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
