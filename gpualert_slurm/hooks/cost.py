"""What a hook cost its host: one log line per monitored job with CPU seconds and peak RSS,
so an admin (and bench/bench_scale.py) can see what gpualert costs slurmctld's host and each
node without a profiler. Counts the whole hook: the interpreter's start before a detached
worker's fork (taken at the fork) and the children it waited for (classifier, grep)."""

from __future__ import annotations

import resource

# the parent's (cpu s incl. its children, peak rss KiB, its children's peak KiB) at detach()
_pre_fork: tuple[float, int, int] | None = None


def _cpu(r: resource.struct_rusage) -> float:
    return r.ru_utime + r.ru_stime


def before_fork() -> None:
    """Called by detach() in the caller: the worker's figures then include what the hook's
    process had spent before it detached (ru_* of a forked child start at zero)."""
    global _pre_fork
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    _pre_fork = (_cpu(r) + _cpu(c), r.ru_maxrss, c.ru_maxrss)


def usage() -> dict[str, float]:
    """cpu_s (own + waited-for children + before the fork), rss_mib (this process's peak),
    child_rss_mib (the largest waited-for child's peak)."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    pre_cpu, pre_rss, pre_child_rss = _pre_fork or (0.0, 0, 0)
    return {"cpu_s": _cpu(s) + _cpu(c) + pre_cpu,
            "child_cpu_s": _cpu(c),
            "rss_mib": max(s.ru_maxrss, pre_rss) / 1024,   # Linux: KiB
            "child_rss_mib": max(c.ru_maxrss, pre_child_rss) / 1024}


def line(jobid: str, hook: str) -> str:
    from gpualert_slurm.hooks import gate

    u = usage()
    wait = f", waited {gate.waited_s:.1f} s for a slot" if gate.waited_s is not None else ""
    return (f"job {jobid}: {hook} cost cpu {u['cpu_s']:.3f} s (children {u['child_cpu_s']:.3f}"
            f" s), peak rss {u['rss_mib']:.1f} MiB (largest child {u['child_rss_mib']:.1f} MiB)"
            + wait)
