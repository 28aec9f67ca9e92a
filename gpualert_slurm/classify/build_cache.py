"""`python -m gpualert_slurm.classify.build_cache` (scripts/install.sh, as root): build the rule
cache (rulecache.py) for the rules as installed: with the site rules, or, when they are invalid,
for the shipped rules alone, as the epilog then falls back to them."""

from __future__ import annotations

import os
import sys

from gpualert_slurm.classify.rulecache import cache_dir
from gpualert_slurm.classify.rules import RuleError, load_rules


def main() -> int:
    site = True
    try:
        load_rules(use_cache=False)
    except RuleError as e:
        print(f"gpualert rules: site rules invalid ({e}); caching the shipped rules alone",
              file=sys.stderr)
        site = False
        load_rules(use_cache=False, site=False)
    rs = load_rules(use_cache=False, site=site)  # read back: where it is, that it reads
    if rs.cached is None:
        print(f"gpualert rules: no rule cache written (directory {cache_dir()}, "
              f"euid {os.geteuid()})", file=sys.stderr)
        return 1
    print(f"gpualert rules: {len(rs.rules)} rules cached in {rs.cached}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
