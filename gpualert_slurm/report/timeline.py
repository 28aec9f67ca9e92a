"""The report's timeline picture for multi-node failures: one row per node, each rank's last
output (dot) and end (mark), the root rank starred, times relative to the root rank's end, so
a reader sees at a glance who died first. A PNG (mail clients strip SVG and scripts), attached
inline with a Content-ID; bounded: at most MAX_ROWS nodes (the root's and those whose ranks
ended first), a fixed width, MAX_BYTES at most. matplotlib is imported only here, only when a
picture is drawn; without it the report goes out without the picture."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from typing import Any

from gpualert_slurm.core.verdict import VerdictRecord

CID = "timeline@gpualert"
MAX_ROWS = 48
MAX_BYTES = 150_000
# outcome -> colour of its end mark
COLOURS = {"exited": "#d97706", "SIGTERM": "#6e7781", "SIGKILL": "#8250df",
           "left no": "#0550ae", "exited 0": "#1a7f37"}


def _node_key(n: str) -> tuple:
    m = re.fullmatch(r"(.*?)(\d+)", n)
    return (m.group(1), int(m.group(2)), n) if m else (n, -1, n)


def _tasks(v: VerdictRecord) -> list[Mapping[str, Any]]:
    return [t for t in v.tasks if t.get("step") != "batch"
            and isinstance(t.get("rank"), int) and t.get("node")]


def wanted(v: VerdictRecord | Mapping[str, Any]) -> bool:
    """Only for a failed job whose ranks ran on more than one node."""
    v = VerdictRecord.of(v)
    if not v.failed_or_silent:
        return False
    return len({t["node"] for t in _tasks(v)}) > 1


def _colour(t: Mapping[str, Any]) -> str:
    from gpualert_slurm.report.ranks import outcome

    what = outcome(t)
    if what == "exited 0":
        return COLOURS["exited 0"]
    return next((c for k, c in COLOURS.items() if k in what), "#d97706")


def timeline_png(v: VerdictRecord | Mapping[str, Any]) -> bytes | None:
    """The picture, or None when there is none to draw (single node, no end times) or
    matplotlib is missing or fails."""
    v = VerdictRecord.of(v)
    if not wanted(v):
        return None
    tasks = _tasks(v)
    rr, rs = v.cause.root_rank, v.cause.root_step
    root = next((t for t in tasks if t["rank"] == rr
                 and (rs is None or str(t.get("step")) == str(rs))), None)
    ends = [t["end_time"] for t in tasks if isinstance(t.get("end_time"), int | float)]
    if not ends:
        return None
    t0 = root["end_time"] if root and isinstance(root.get("end_time"), int | float) \
        else min(ends)
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for t in tasks:
        by_node.setdefault(t["node"], []).append(t)
    nodes = sorted(by_node, key=_node_key)
    note = ""
    if len(nodes) > MAX_ROWS:
        def first_end(n: str) -> float:
            return min((t["end_time"] for t in by_node[n]
                        if isinstance(t.get("end_time"), int | float)), default=float("inf"))
        keep = {root["node"]} if root else set()
        for n in sorted(nodes, key=first_end):
            if len(keep) >= MAX_ROWS:
                break
            keep.add(n)
        note = f" ({MAX_ROWS} of {len(nodes)} nodes: the root's and those that ended first)"
        nodes = [n for n in nodes if n in keep]
    try:
        return _draw(by_node, nodes, root, t0, note)
    except Exception:  # a picture is never worth the report
        return None


def _draw(by_node: dict[str, list[Mapping[str, Any]]], nodes: list[str],
          root: Mapping[str, Any] | None, t0: float, note: str) -> bytes | None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = len(nodes)
    fig = Figure(figsize=(7.2, 1.3 + 0.16 * rows), dpi=90)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    xs = [0.0]
    for y, n in enumerate(nodes):
        ts = sorted(by_node[n], key=lambda t: t["rank"])
        for k, t in enumerate(ts):
            dy = (k - (len(ts) - 1) / 2) * min(0.18, 0.7 / max(1, len(ts)))
            end = t.get("end_time")
            last = t.get("last_output")
            xe = end - t0 if isinstance(end, int | float) else None
            xl = last - t0 if isinstance(last, int | float) else None
            xs += [x for x in (xl, xe) if x is not None]
            if xl is not None and xe is not None:
                ax.plot([xl, xe], [y + dy, y + dy], color="#d0d7de", lw=0.8, zorder=1)
            if xl is not None:
                ax.plot([xl], [y + dy], "o", ms=2.5, color="#57606a", zorder=2)
            if xe is not None:
                ax.plot([xe], [y + dy], "|", ms=6, mew=1.4, color=_colour(t), zorder=3)
    if root is not None and root["node"] in nodes:
        y = nodes.index(root["node"])
        ax.plot([0], [y], "*", ms=13, color="#b42318", zorder=4)
        ax.annotate(f"rank {root['rank']} (root)", (0, y), xytext=(6, 4),
                    textcoords="offset points", fontsize=8, color="#b42318")
    # one legend entry per kind of end present, so the colours need no explaining
    from matplotlib.lines import Line2D

    from gpualert_slurm.report.ranks import outcome

    kinds: dict[str, str] = {}
    for n in nodes:
        for t in by_node[n]:
            if t is not root:
                kinds.setdefault(outcome(t).split(" (")[0], _colour(t))
    handles = [Line2D([], [], ls="", marker="|", ms=7, mew=1.4, color=c, label=k)
               for k, c in list(kinds.items())[:4]]
    if root is not None:
        handles.insert(0, Line2D([], [], ls="", marker="*", ms=9, color="#b42318",
                                 label=f"root: rank {root['rank']}"))
    # above the plot, beside the title: inside it, it hid the ranks at its corner
    ax.legend(handles=handles, fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0),
              ncol=len(handles), frameon=False, borderaxespad=0.2)
    # at least a second across: ranks that end within microseconds (one node's srun kill)
    # would otherwise get tick labels in millionths, and the root's label would leave the plot
    lo, hi = min(xs), max(xs)
    widen = max(0.0, 1.0 - (hi - lo)) / 2
    pad = 0.06 * (hi - lo + 2 * widen)
    ax.set_xlim(lo - widen - pad, hi + widen + 2.5 * pad)
    ax.set_yticks(range(rows))
    ax.set_yticklabels(nodes, fontsize=6 if rows > 24 else 8)
    ax.invert_yaxis()
    ax.set_ylim(rows - 0.5, -0.5)
    ax.axvline(0, color="#b42318", lw=0.6, ls="--", zorder=0)
    ax.set_xlabel("seconds from the root rank's end (dot: last output, bar: end)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title("Ranks by node" + note, fontsize=9, loc="left")
    ax.grid(axis="x", color="#eaecef", lw=0.5)
    fig.tight_layout()
    for dpi in (90, 70, 50):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
        data = buf.getvalue()
        if len(data) <= MAX_BYTES:
            return data
    return None


def inline_images(v: VerdictRecord | Mapping[str, Any]) -> list[tuple[str, bytes, str]]:
    """(Content-ID, data, mime) of the pictures the HTML part shows."""
    png = timeline_png(v)
    return [(CID, png, "image/png")] if png else []
