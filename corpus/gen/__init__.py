"""One corpus generator library: capture, transforms, synthetic composers; sets are data files.

A set (`sets/<name>.yaml`) lists its cases; `build.py <name>` runs them into `corpus/<dir>/`
(cases/ and labels.jsonl in the format of docs/CLASSIFY-API.md).
"""
