"""Realistic surroundings for the holdout2 failure programs: config dumps, timestamped logging,
tqdm-like progress and warnings, so a failure is embedded the way it is in real training logs."""

from __future__ import annotations

import logging
import os
import random
import sys
import time

log = logging.getLogger("trainer")


def setup(name: str = "trainer", style: int = 0) -> logging.Logger:
    fmts = [
        "%(asctime)s | %(levelname)-7s | %(name)s | %(message)s",
        "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s",
        "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s",
    ]
    logging.basicConfig(level=logging.INFO, format=fmts[style % len(fmts)], stream=sys.stdout,
                        force=True)
    global log
    log = logging.getLogger(name)
    return log


def config_dump(cfg: dict, style: int = 0) -> None:
    if style == 0:
        print("=" * 30 + " config " + "=" * 30)
        for k, v in cfg.items():
            print(f"  {k:<24}: {v}")
        print("=" * 68)
    elif style == 1:
        print("Namespace(" + ", ".join(f"{k}={v!r}" for k, v in cfg.items()) + ")")
    else:
        for k, v in cfg.items():
            log.info("cfg.%s = %s", k, v)
    sys.stdout.flush()


def progress(desc: str, total: int, upto: int | None = None, delay: float = 0.0,
             seed: int = 0) -> None:
    """tqdm-like progress on stderr (carriage returns, like tqdm does)."""
    rnd = random.Random(seed)
    upto = total if upto is None else upto
    t0 = time.time()
    for i in range(1, upto + 1):
        if delay:
            time.sleep(delay)
        if i % max(1, total // 20) == 0 or i == upto:
            el = time.time() - t0 + 1e-9
            pct = int(100 * i / total)
            bar = "#" * (pct // 10) + " " * (10 - pct // 10)
            loss = 2.5 / (1 + i * 0.01) + rnd.random() * 0.05
            sys.stderr.write(f"\r{desc}: {pct:3d}%|{bar}| {i}/{total} "
                             f"[{el:.0f}s, {i / el:.2f}it/s, loss={loss:.4f}]")
            sys.stderr.flush()
    sys.stderr.write("\n")
    sys.stderr.flush()


def env_banner() -> None:
    log.info("host=%s pid=%d python=%s", os.uname().nodename, os.getpid(), sys.version.split()[0])
    log.info("world_size=%s rank=%s local_rank=%s", os.environ.get("WORLD_SIZE", "1"),
             os.environ.get("RANK", "0"), os.environ.get("LOCAL_RANK", "0"))
