"""Streaming scan of one log: fixed memory, any size, any bytes.

The scanner in four parts, and the reading policy that uses them:
- lines.py: what a line is to the rules: colour codes, Markdown marks and launcher prefixes
  removed (clean_text, line_view), its shape (NORM: digits as 0; hex_keys: hex ids marked),
  long lines capped;
- python.py: the rule matcher (_Matcher) and the Python path over a range (the dedup of line
  shapes, the literal search); Event and ScanResult;
- blind.py: rule patterns rewritten to judge whether lines of one shape differ for the rules
  (digit values, hex ids);
- ere.py: the rules' regexes as EREs for GNU grep (grep_patterns);
- grep.py: the grep pipeline over a range (a feeder thread, one or more greps, their rows
  matched by the Python path's rule, _pick);
- reading.py: scan_file, the reading policy (head, tail, budget, the file's end) and which
  engine reads each range (Python first, grep from a chunk of many shapes on; a long range in
  pieces read by forked children at once, cut on the chunk grid).
Each module's own docstring says how its part works. This module re-exports the names that
the classifier, the tests and the benchmark use.

Environment overrides: GPUALERT_SCAN_HEAD_MB, GPUALERT_SCAN_TAIL_MB, GPUALERT_SCAN_BUDGET_S,
GPUALERT_SCAN_NATIVE (0: no grep), GPUALERT_SCAN_NATIVE_MIN (bytes), GPUALERT_SCAN_GREP (path),
GPUALERT_SCAN_WORKERS (1: one grep per range), GPUALERT_SCAN_SPLIT_MIN (bytes),
GPUALERT_SCAN_PYTHON_FIRST (0: grep from the start of a range), GPUALERT_SCAN_HANDOVER_SHAPES,
GPUALERT_SCAN_PARALLEL (0: a Python-first range is not read in pieces by forked children).
A test that changes a setting changes it in the module that reads it (reading.NATIVE,
grep.WORKERS, python.HANDOVER_SHAPES, ...): the names here are copies.
"""

from gpualert_slurm.classify.scan.blind import _digit_blind
from gpualert_slurm.classify.scan.ere import grep_patterns
from gpualert_slurm.classify.scan.grep import (
    BLOCK,
    GREP,
    GREP_MATCH,
    SPLIT_MIN,
    WORKERS,
    NativeError,
    _scan_range_native,
)
from gpualert_slurm.classify.scan.lines import (
    LINE_CAP,
    NORM,
    LineView,
    clean_text,
    hex_key,
    hex_keys,
    line_view,
)
from gpualert_slurm.classify.scan.python import (
    CHUNK,
    HANDOVER_SHAPES,
    KEEP_EVENTS,
    REPEAT_KEEP,
    Event,
    Hit,
    ScanResult,
    _Matcher,
)
from gpualert_slurm.classify.scan.reading import (
    BUDGET_S,
    END_BYTES,
    HEAD_BYTES,
    NATIVE,
    NATIVE_MIN,
    PYTHON_FIRST,
    TAIL_BYTES,
    scan_file,
)

__all__ = [
    "BLOCK", "BUDGET_S", "CHUNK", "END_BYTES", "GREP", "GREP_MATCH", "HANDOVER_SHAPES",
    "HEAD_BYTES", "KEEP_EVENTS", "LINE_CAP", "NATIVE", "NATIVE_MIN", "NORM", "PYTHON_FIRST",
    "REPEAT_KEEP", "SPLIT_MIN", "TAIL_BYTES", "WORKERS", "Event", "Hit", "LineView",
    "NativeError", "ScanResult", "_Matcher", "_digit_blind", "_scan_range_native", "clean_text",
    "grep_patterns", "hex_key", "hex_keys", "line_view", "scan_file",
]
