"""The Grafana dashboard (etc/grafana/gpualert-dashboard.json, shipped by the .deb): every query
names only metrics `gpualert metrics` writes, and groups, matches and labels its legends only
by labels those metrics carry. A metric renamed or a label dropped fails here, not on a
site's empty panel."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from gpualert_slurm.commands.metrics import Scan, render
from gpualert_slurm.core.config import Config

DASHBOARD = Path(__file__).resolve().parent.parent / "etc" / "grafana" / "gpualert-dashboard.json"
PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "by", "without", "topk", "bottomk",
                "increase", "rate", "time", "sort_desc", "sort", "and", "or", "unless", "on",
                "ignoring", "group_left", "group_right", "bool", "offset"}


def written() -> dict[str, set[str]]:
    """metric name -> the label names its samples carry, from a pass where every family has
    samples."""
    s = Scan(failures=Counter({("cuda_oom", "gpu"): 2}),
             failures_by_node=Counter({("cuda_oom", "n1"): 2}),
             hardware=Counter({"n2": 5}), reports=Counter({"sent": 1, "quarantined": 1}),
             outbox=Counter({("waiting", "mail"): 1}), outbox_oldest={"waiting": 1.0},
             decisions=Counter({("drain_node", "action"): 1}),
             results=Counter({("drain_node", "done"): 1}), breakers={"gpu": 100.0},
             errors=Counter({"verdict": 1}), job_dirs=3, verdicts=3)
    out: dict[str, set[str]] = {}
    for line in render(s, Config(), 200.0, 0.5).splitlines():
        m = re.match(r"([a-z_]+)(?:\{(.*)\})? ", line)
        if m and not line.startswith("#"):
            out.setdefault(m.group(1), set()).update(
                re.findall(r'([a-z_]+)="', m.group(2) or ""))
    return out


def queries() -> list[tuple[str, str, str]]:
    """(panel title, expr, legendFormat) of every target."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"], t.get("legendFormat", "")))
    return out


def test_the_dashboard_has_the_panels_the_issue_asks_for() -> None:
    exprs = " ".join(e for _t, e, _l in queries())
    for metric in ("gpualert_failed_jobs", "gpualert_failed_jobs_by_node", "gpualert_reports",
                   "gpualert_outbox_messages", "gpualert_recovery_decisions_total",
                   "gpualert_breaker_open", "gpualert_node_repeated_hardware"):
        assert re.search(rf"\b{metric}\b", exprs), metric
    assert 'status="quarantined"' in exprs


def test_every_query_names_a_written_metric_with_its_labels() -> None:
    have = written()
    assert len(queries()) >= 15
    for title, expr, legend in queries():
        metrics = set(re.findall(r"\bgpualert_[a-z_]+\b", expr))
        assert metrics, (title, expr)
        unknown = metrics - set(have)
        assert not unknown, (title, unknown)
        labels = set().union(*(have[m] for m in metrics))
        used = set()
        for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            used |= {x.strip() for x in group.split(",") if x.strip()}
        for matchers in re.findall(r"\{([^}]*)\}", expr):
            used |= set(re.findall(r"([a-z_]+)\s*=~?", matchers))
        used |= set(re.findall(r"\{\{\s*([a-z_]+)\s*\}\}", legend))
        assert used <= labels, (title, used - labels)
        # nothing else that looks like a metric: a typo is not taken for a function
        words = set(re.findall(r"\b([a-z_]+)\s*\(", expr)) - PROMQL_WORDS
        assert not words, (title, words)
