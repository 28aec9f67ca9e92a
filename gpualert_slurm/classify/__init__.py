"""The classifier: why did this job fail, which rank failed first, and what to do about it.

The contract (docs/CLASSIFY-API.md): classify(tasks, job, rules=None) -> Cause (core.verdict's
frozen, typed verdict), from a job's task logs (TaskInput) and facts (JobFacts); an unreadable
log is noted in the verdict's detail, never fatal. Cause.to_json() is the object `gpualert
classify --json` prints, verdict.json's "verdict" and what every report reads. load_rules()
gives the rule set (RuleError naming file, rule and field when a rule file is wrong);
load_precedence() the order in which the kinds of evidence decide. Rules, classes and
that order are data (rules/NN-<family>.yaml, classes.yaml, a site's rules.d, precedence.yaml).

Inside, one job a module; each imports only modules listed above it (and rules, scan, core):
  model       the API types (TaskInput, JobFacts), Draft (the verdict while it is made), _Finding
  logread     a log's lines read again after the scan
  incident    tracebacks and exception chains: which event of a log is its incident
  locate      the root rank and node, the lost node, stragglers, cascades
  precedence  precedence.yaml read into a value
  context     one job's evidence, computed once, and how a verdict is made from it
  endings     how a log ends (end lines, silence, skipped steps, abandoned work)
  steps       the decision steps (STEPS); precedence.yaml orders them
  pipeline    classify(): scan each log, prepare its events, decide
  rules, scan, rulecache: the rules loaded, a log matched, the on-disk cache.
The class table (classes.yaml) is read by gpualert_slurm.core.classes.
"""

from gpualert_slurm.classify.model import JobFacts, TaskInput
from gpualert_slurm.classify.pipeline import classify
from gpualert_slurm.classify.rules import RuleError, RuleSet, load_rules
from gpualert_slurm.classify.steps import load_precedence
from gpualert_slurm.core.verdict import Cause

__all__ = ["TaskInput", "JobFacts", "Cause", "RuleError", "RuleSet", "classify", "load_rules",
           "load_precedence"]
