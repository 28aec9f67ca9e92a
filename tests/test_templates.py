"""The message templates (gpualert_slurm/data/templates/, docs/TEMPLATES.md): the page lists
exactly the templates there are; each template uses only the variables the page lists for it;
the code gives each template exactly those variables; and every template renders, under
StrictUndefined, from the variables the page lists, escaping a job's text in its HTML part."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from gpualert_slurm.core import templates

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "TEMPLATES.md"
TOPS = ("r", "a")  # the report's and the array summary's one mapping
EVIL = "<script>x</script> \"q\" 'a' & {{ 7*7 }} {% raw %}"


def documented() -> dict[str, dict[str, Any]]:
    """kind -> {"files": [...], "vars": {...}} as docs/TEMPLATES.md says."""
    kinds: dict[str, dict[str, Any]] = {}
    same: dict[str, str] = {}
    kind = None
    for line in DOC.read_text().splitlines():
        m = re.match(r"## (\w+)\s*$", line)
        if m:
            kind = m.group(1)
            continue
        if kind is None:
            continue
        if line.startswith("Files:"):
            kinds[kind] = {"files": re.findall(r"`([^`]+)`", line), "vars": set()}
        elif m := re.match(r"Variables: the same as (\w+)'s\.", line):
            same[kind] = m.group(1)
        elif line.startswith("| `") and kind in kinds:
            kinds[kind]["vars"].add(re.match(r"\| `([^`]+)`", line).group(1))
    for k, other in same.items():
        assert not kinds[k]["vars"], f"{k}: both 'the same as' and a table"
        kinds[k]["vars"] = set(kinds[other]["vars"])
    return kinds


def _env(strict: bool = False) -> Any:
    return templates.environment((templates.DATA_DIR,), strict)


def used(name: str) -> set[str]:
    """The variables template `name` and those it extends or includes ask for: 'r.x' for an
    attribute of the one mapping, else the name."""
    from jinja2 import meta, nodes

    env = _env()
    ast = env.parse(env.loader.get_source(env, name)[0])
    free = meta.find_undeclared_variables(ast)
    out = {n for n in free if n not in TOPS}
    # (a loop variable of the same name, like the report's attachment `a`, is not the mapping)
    out |= {f"{g.node.name}.{g.attr}" for g in ast.find_all(nodes.Getattr)
            if isinstance(g.node, nodes.Name) and g.node.name in free & set(TOPS)}
    for other in meta.find_referenced_templates(ast):
        out |= used(other)
    return out


def test_the_page_lists_exactly_the_templates_there_are() -> None:
    there = sorted(f for f in os.listdir(templates.DATA_DIR) if f.endswith(".j2"))
    listed = sorted(f for k in documented().values() for f in k["files"])
    assert listed == there
    # one pair per kind, except the MailProg's (Slurm's mail is text/plain)
    for kind, k in documented().items():
        want = [f"{kind}.txt.j2"] if kind == "mailprog" else [f"{kind}.html.j2", f"{kind}.txt.j2"]
        assert sorted(k["files"]) == want, kind
    assert set(documented()) == {"report", "fallback", "array", "hang", "straggler", "mailprog"}


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(templates.DATA_DIR)
                                        if f.endswith(".j2")))
def test_each_template_uses_only_listed_variables(name: str) -> None:
    kind = name.split(".")[0]
    doc = documented()[kind]["vars"]
    assert used(name) <= doc, sorted(used(name) - doc)
    assert used(name), name  # it asks for something: the parse found its variables


# ---- what the code gives each kind: every listed variable, nothing more --------------------

def _verdict() -> dict[str, Any]:
    return {"version": 1, "job_id": "5", "failed": True, "attempt_path": "/s/5",
            "job": {"name": "n", "user": "u", "exit_code": 1},
            "verdict": {"class": "cuda_oom", "root_rank": 2, "root_node": "g1", "hint": "h",
                        "evidence": [{"file": "/s/5/tasks/0.2.log", "line": 3, "text": EVIL}]}}


def test_the_report_gets_the_listed_variables() -> None:
    from gpualert_slurm.report import context

    got = {f"r.{k}" for k in context(_verdict())}
    assert got == documented()["report"]["vars"]


def test_the_array_summary_gets_the_listed_variables() -> None:
    from gpualert_slurm.hooks.job_epilog.arrays import array_context

    s = {"array_id": "7", "tasks": {
        "1": {"task_id": "1", "job_id": "8", "ran": True, "failed": True, "class": "cuda_oom",
              "hint": "h", "root_node": "g1", "root_rank": 0, "evidence": [], "name": "n",
              "user": "u"},
        "2": {"task_id": "2", "ran": False}}}
    got = {f"a.{k}" for k in array_context(s, "/spool")}
    assert got == documented()["array"]["vars"]


def _capture(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    real = templates.render

    def render(name: str, site: str | None = None, **variables: Any) -> str:
        seen.append((name, variables))
        return real(name, site, **variables)

    monkeypatch.setattr(templates, "render", render)
    return seen


@pytest.mark.parametrize("kind", ["hung", "straggler"])
def test_the_watch_alerts_get_the_listed_variables(kind: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from gpualert_slurm.recovery import watch

    seen = _capture(monkeypatch)
    beats = {"0.0": {"silence_s": 40.0, "file": "/s/9/tasks/0.0.log", "tail": ["x"]},
             "0.1": {"silence_s": 2.0, "file": "/s/9/tasks/0.1.log"}}
    subject, text, html = watch.alert_text(kind, "9", 0, ["0.0"], beats, 30.0)
    name = "hang" if kind == "hung" else "straggler"
    assert [n for n, _ in seen] == [f"{name}.txt.j2", f"{name}.html.j2"]
    for _, variables in seen:
        assert set(variables) == documented()[name]["vars"]
    assert html == "<pre>" + __import__("html").escape(text) + "</pre>"


def test_the_mailprog_block_gets_the_listed_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpualert_slurm.notify.mailprog import verdict_text

    seen = _capture(monkeypatch)
    out = verdict_text(_verdict()["verdict"], "5")
    assert [n for n, _ in seen] == ["mailprog.txt.j2"]
    assert set(seen[0][1]) == documented()["mailprog"]["vars"]
    assert out.startswith("-- gpualert --\nCause: cuda_oom\n") and not out.endswith("\n")


# ---- every template renders from the listed variables alone --------------------------------

def _report_sample() -> dict[str, Any]:
    return {"r": {
        "headline": f"FAILED job 5 ({EVIL})", "status_word": "FAILED", "failed": True,
        "silent": True, "job_id": "5", "cls": "cuda_oom", "label": "CUDA out of memory",
        "domain": "workload", "confidence": 0.9, "hint": EVIL, "detail": EVIL, "root_rank": 2,
        "root_node": "g1", "root_step": "0",
        "evidence": [{"file": "/s/5/tasks/0.2.log", "short": "tasks/0.2.log", "line": 3,
                      "text": EVIL, "source": "printed by the job"}],
        "cascades": [{"rank": 1, "cls": "nccl_error", "file": "/s/5/tasks/0.1.log",
                      "short": "tasks/0.1.log", "line": 9}],
        "rank_groups": ["root: rank 2"], "timeline_cid": "timeline@gpualert",
        "facts": [("User", "u"), ("Job", f"5 ({EVIL})")],
        "last_lines": {"file": "/s/5/tasks/0.2.log", "short": "tasks/0.2.log",
                       "lines": [EVIL]},
        "manifest": {"budget_h": "10.0 MiB", "used_h": "1.0 KiB",
                     "attached": [{"name": "0.2.log", "size_h": "1.0 KiB", "note": "cut"}],
                     "attached_more": {"count": 3, "size_h": "3 B", "attached_h": "3 B"},
                     "left_out": [{"name": EVIL, "size_h": "9.0 GiB", "reason": "budget",
                                   "where": "/w"}]},
        "notes": [EVIL], "recovery": ["would requeue"], "logs_dir": "/s/5/tasks",
        "page_url": "https://ondemand.example.org/pun/sys/gpualert/job/5"}}


def _array_sample() -> dict[str, Any]:
    first = {"task_id": "1", "job_id": "8", "root_node": "g1", "root_rank": 0,
             "evidence": [{"file": "/s/8/tasks/0.0.log", "line": 2, "text": EVIL}]}
    return {"a": {"headline": f"array 7 ({EVIL})", "array_id": "7", "name": EVIL, "total": 2,
                  "failed": 1, "ok": 1, "never_ran": 1, "spool": "/spool", "user": "u",
                  "notes": [EVIL],
                  "groups": [{"cls": "cuda_oom", "label": "CUDA out of memory", "count": 1,
                              "tasks": ["1"], "hint": EVIL, "first": first}]}}


def _watch_sample() -> dict[str, Any]:
    return {"job_id": "9", "attempt": 1, "hang_s": 30.0, "who": "rank 0.0",
            "beats": [{"rank": "0.0", "silence_s": 40.4, "file": "/s/9/tasks/0.0.log",
                       "tail": [EVIL]}]}


def _mailprog_sample() -> dict[str, Any]:
    return {"job_id": "5", "cls": "cuda_oom", "hint": EVIL, "detail": EVIL, "root_rank": 2,
            "root_node": "g1", "evidence": [{"file": "/s/5/tasks/0.2.log", "line": "3",
                                             "text": EVIL}]}


SAMPLES = {"report": _report_sample, "fallback": _report_sample, "array": _array_sample,
           "hang": _watch_sample, "straggler": _watch_sample, "mailprog": _mailprog_sample}


def _flat(sample: dict[str, Any]) -> set[str]:
    top = next((t for t in TOPS if t in sample), None)
    return {f"{top}.{k}" for k in sample[top]} if top else set(sample)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_template_renders_from_its_listed_variables(kind: str) -> None:
    doc = documented()[kind]
    sample = SAMPLES[kind]()
    assert _flat(sample) == doc["vars"]  # the sample is the page's list, no more, no less
    for name in doc["files"]:
        out = _env(strict=True).get_template(name).render(**sample)
        assert "5" in out or "7" in out or "9" in out  # the job or array id
        if name.endswith(".html.j2"):
            # a job's text is shown, escaped: no tag, no quote, no template syntax run
            assert "<script>" not in out and "&lt;script&gt;" in out, out
            assert "{{ 7*7 }}" in out and "{% raw %}" in out
        else:
            assert EVIL in out  # text parts show it as it came (their inputs are made safe)


def test_the_fallback_is_the_report_as_packaged() -> None:
    env = _env(strict=True)
    for ext in ("txt", "html"):
        a = env.get_template(f"report.{ext}.j2").render(**_report_sample())
        b = env.get_template(f"fallback.{ext}.j2").render(**_report_sample())
        assert a == b


def test_the_fallback_report_is_rendered_as_a_report_unless_the_site_says_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpualert_slurm.report import render

    # the verdict hooks/job_epilog/verdict.fallback_verdict writes (tests/test_verdict.py)
    v = {"version": 1, "job_id": "7", "attempt": 0, "attempt_path": "/spool/7",
         "logs_dir": "/spool/7/tasks",
         "job": {"name": None, "user": "bob", "nodelist": "n1", "exit_code": 1, "signal": 0,
                 "work_dir": None},
         "failed": True, "silent_failure": False,
         "verdict": {"class": "unknown", "domain": "unknown", "confidence": 0.0,
                     "hint": "gpualert could not analyse this job; its logs are complete.",
                     "detail": "gpualert error: RuntimeError: x"},
         "tasks": [], "notes": ["gpualert error while writing this report: RuntimeError('x')"]}
    monkeypatch.setenv("GPUALERT_TEMPLATES", str(tmp_path / "none"))
    for fmt in ("text", "html"):
        assert render(v, fmt, kind="fallback") == render(v, fmt)
    assert "What to do: gpualert could not analyse this job" in render(v, "text", kind="fallback")
    site = tmp_path / "site"
    site.mkdir()
    (site / "fallback.txt.j2").write_text("LEAST {{ r.job_id }}: {{ r.detail }}\n")
    monkeypatch.setenv("GPUALERT_TEMPLATES", str(site))
    assert render(v, "text", kind="fallback") == "LEAST 7: gpualert error: RuntimeError: x\n"
    assert render(v, "text").startswith("FAILED job 7")  # the report itself: as packaged
    assert render(v, "html", kind="fallback") == render(v, "html")
