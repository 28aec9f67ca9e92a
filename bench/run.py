"""Run every bench/bench_*.py in turn with this interpreter; exit 1 if any of them failed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    benches = sorted(here.glob("bench_*.py"))
    if not benches:
        print("bench: no bench/bench_*.py found", file=sys.stderr)
        return 1
    failed = []
    for b in benches:
        print(f"==== {b.name} ====", flush=True)
        t0 = time.monotonic()
        rc = subprocess.call([sys.executable, str(b), *sys.argv[1:]], cwd=here.parent)
        print(f"==== {b.name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} "
              f"in {time.monotonic() - t0:.1f} s ====\n", flush=True)
        if rc != 0:
            failed.append(b.name)
    if failed:
        print(f"bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
