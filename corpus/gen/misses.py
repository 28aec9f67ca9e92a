#!/usr/bin/env python3
"""List every case of a corpus the classifier gets wrong, with the line it decided on and the
last telling line of the failing task's log. Run with the gpualert venv's python:
/opt/gpualert/venv/bin/python corpus/gen/misses.py corpus/holdout2"""

import sys
from pathlib import Path

from gpualert_slurm.classify import classify, load_rules
from gpualert_slurm.commands.eval import case_inputs, load_labels


def last_line(path: str) -> str:
    """Last non-blank, non-indented, non-progress line: usually the one that says why."""
    try:
        text = Path(path).read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.split("\r")[-1].strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("File ", "^", "~", "[rank"))]
    return lines[-1][:160] if lines else ""


def main() -> int:
    corpus = Path(sys.argv[1] if len(sys.argv) > 1 else "corpus/holdout2")
    rules = load_rules()
    n = 0
    for lab in load_labels(corpus):
        tasks, job = case_inputs(corpus, lab)
        v = classify(tasks, job, rules)
        root = lab.get("root_rank")
        if v.cls == lab["class"] and (root is None or v.root_rank == root):
            continue
        n += 1
        ev = v.evidence[0] if v.evidence else {}
        ev_text = ev.get("text") if isinstance(ev, dict) else getattr(ev, "text", "")
        failing = [t for t in tasks if t.exit_code != 0] or tasks
        failing = [t for t in failing if root is None or t.rank == root] or failing
        print(f"- {lab['id']}: label {lab['class']} (root {root}) -> predicted {v.cls} "
              f"(root {v.root_rank}, conf {v.confidence:.2f})\n"
              f"    evidence: {(ev_text or '(none)')[:160]!r}\n"
              f"    log says: {last_line(failing[0].path)!r}")
    print(f"{n} misses (class or root rank)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
