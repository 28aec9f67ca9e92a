"""Rule patterns rewritten to judge whether the lines of one shape (or hex key) differ for the
rules: the digit-blind form (_digit_blind: lines that differ only in digit values) and the
"may" / "must" forms over marked hex ids and digits (_marks_rx, for _Matcher.hex_uniform).
Each works on re's parsed pattern, and gives up (None) on what it cannot judge: the caller then
matches those lines one by one.
"""

from __future__ import annotations

import functools
import re
from re import _parser as sre_parse  # type: ignore[attr-defined]  # the parsed patterns

_FLAG_CHARS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.ASCII, "a"))


def _flags(bits: int) -> str:
    return "".join(c for f, c in _FLAG_CHARS if bits & f)


def _blind_seq(items, dep: list[bool]) -> str:
    """Regex text matching every text `items` (a parsed sequence) matches and every text
    that differs from one of those only in the values of ASCII digits (lookaheads that
    must fail, back-references and possessive or atomic limits are left off: more, never
    less). `dep` gets True when the sequence reads a digit's value (a digit literal, a class
    of some digits, a back-reference): it matches some digit variants and not others."""
    out = []
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            digit = 48 <= av <= 57
            dep.append(digit)
            out.append("[0-9]" if digit else re.escape(chr(av)))
        elif name == "NOT_LITERAL":
            digit = 48 <= av <= 57
            dep.append(digit)
            out.append("[\\s\\S]" if digit else "[^" + re.escape(chr(av)) + "]")
        elif name == "ANY":
            out.append(".")
        elif name == "IN":
            out.append(_blind_class(av, dep))
        elif name == "AT":
            out.append(_AT[str(av)])
        elif name == "SUBPATTERN":
            add, drop = _flags(av[1]), _flags(av[2])
            out.append(f"(?{add}{'-' + drop if drop else ''}:{_blind_seq(av[-1], dep)})")
        elif name == "BRANCH":
            out.append("(?:" + "|".join(_blind_seq(alt, dep) for alt in av[1]) + ")")
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi = av[0], av[1]
            rep = f"{{{lo},{'' if hi == sre_parse.MAXREPEAT else hi}}}"
            out.append(f"(?:{_blind_seq(av[2], dep)}){rep}"
                       + ("?" if name == "MIN_REPEAT" else ""))
        elif name == "ATOMIC_GROUP":
            out.append(f"(?:{_blind_seq(av, dep)})")
        elif name == "ASSERT":
            out.append(("(?=" if av[0] == 1 else "(?<=") + _blind_seq(av[1], dep) + ")")
        elif name == "ASSERT_NOT":
            _blind_seq(av[1], dep)  # left off, but whether it reads digits counts
        elif name == "GROUPREF":
            dep.append(True)
            out.append("[\\s\\S]*?")
        elif name == "GROUPREF_EXISTS":
            dep.append(True)
            out.append(f"(?:{_blind_seq(av[1], dep)}|{_blind_seq(av[2], dep) if av[2] else ''})")
        else:
            raise ValueError(name)
    return "".join(out)


_AT = {"AT_BEGINNING": "^", "AT_BEGINNING_STRING": "\\A", "AT_BOUNDARY": "\\b",
       "AT_NON_BOUNDARY": "\\B", "AT_END": "$", "AT_END_STRING": "\\Z"}
_CAT = {"CATEGORY_DIGIT": "\\d", "CATEGORY_NOT_DIGIT": "\\D", "CATEGORY_SPACE": "\\s",
        "CATEGORY_NOT_SPACE": "\\S", "CATEGORY_WORD": "\\w", "CATEGORY_NOT_WORD": "\\W"}


def _blind_class(av, dep: list[bool]) -> str:
    """A character class, with all ten ASCII digits added when it holds some but not all."""
    cls = _class_text(av, ValueError)
    rx = re.compile(cls)
    n = sum(1 for d in "0123456789" if rx.match(d))
    dep.append(n not in (0, 10))
    return cls if n in (0, 10) else f"(?:{cls}|[0-9])"


@functools.lru_cache(maxsize=4096)
def _digit_blind(source: str) -> tuple[re.Pattern[str], bool] | None:
    """A rule pattern blind to digit values (_blind_seq), compiled, and whether the pattern
    reads a digit's value (if not, it matches every digit variant of a text or none); None
    when it cannot be made (then any line of a shape may match as its others do not)."""
    try:
        parsed = sre_parse.parse(source)
        flags = parsed.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.ASCII)
        dep: list[bool] = []
        return re.compile(_blind_seq(list(parsed), dep), flags), any(dep)
    except (ValueError, KeyError, re.error, RecursionError):
        return None


# ---- lines that differ in hex ids (lines.hex_keys): can the rules tell them apart? ----
# A line of a hex key is written with each id character as _X and each other digit as _Y,
# two word characters (as hex digits are) that no rule names. A pattern is rewritten twice:
# "may" (each element that matches some of the characters an _X or _Y stands for also matches
# the mark: a superset, "some variant matches") and "must" (only an element that matches all
# of them matches the mark: "every variant matches"). The lines of the key are one shape for the
# rules when each candidate rule either must match or may not.
_X, _Y = "\u01c2", "\u01c1"
_HEXCH, _DIGCH = "0123456789abcdef", "0123456789"


class _NoRewrite(Exception):  # noqa: N818  (control flow: the pattern cannot be judged)
    pass


@functools.lru_cache(maxsize=4096)
def _members(text: str, flags: int) -> tuple[bool, bool, bool, bool]:
    """For a one-character regex `text`: (matches some hex digit, all of them, some digit,
    all of them)."""
    rx = re.compile(text, flags)
    hx = [rx.fullmatch(c) is not None for c in _HEXCH]
    dg = hx[:10]
    return any(hx), all(hx), any(dg), all(dg)


def _one(text: str, flags: int, must: bool) -> str:
    some_h, all_h, some_d, all_d = _members(text, flags)
    marks = (_X if (all_h if must else some_h) else "") + (_Y if (all_d if must else some_d)
                                                            else "")
    inner = f"(?![{_X}{_Y}]){text}"
    return f"(?:{inner}|[{marks}])" if marks else f"(?:{inner})"


def _marks_seq(items, flags: int, must: bool) -> str:
    out = []
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            out.append(_one(re.escape(chr(av)), flags, must))
        elif name == "NOT_LITERAL":
            out.append(_one("[^" + re.escape(chr(av)) + "]", flags, must))
        elif name == "ANY":
            out.append(_one(".", flags, must))
        elif name == "IN":
            out.append(_one(_class_text(av), flags, must))
        elif name == "AT":
            out.append(_AT[str(av)])
        elif name == "SUBPATTERN":
            add, drop = _flags(av[1]), _flags(av[2])
            inner = _marks_seq(av[-1], (flags | av[1]) & ~av[2], must)
            out.append(f"(?{add}{'-' + drop if drop else ''}:{inner})")
        elif name == "BRANCH":
            out.append("(?:" + "|".join(_marks_seq(alt, flags, must) for alt in av[1]) + ")")
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            lo, hi = av[0], av[1]
            rep = f"{{{lo},{'' if hi == sre_parse.MAXREPEAT else hi}}}"
            out.append(f"(?:{_marks_seq(av[2], flags, must)}){rep}"
                       + ("?" if name == "MIN_REPEAT" else ""))
        elif name in ("POSSESSIVE_REPEAT", "ATOMIC_GROUP") and not must:
            body = av if name == "ATOMIC_GROUP" else av[2]  # unlimited: more, never less
            rep = "" if name == "ATOMIC_GROUP" else \
                f"{{{av[0]},{'' if av[1] == sre_parse.MAXREPEAT else av[1]}}}"
            out.append(f"(?:{_marks_seq(body, flags, must)}){rep}")
        elif name == "ASSERT":
            out.append(("(?=" if av[0] == 1 else "(?<=") + _marks_seq(av[1], flags, must) + ")")
        elif name == "ASSERT_NOT":  # what must not match: judged the other way round
            try:
                inner = _marks_seq(av[1], flags, not must)
            except _NoRewrite:
                if must:
                    raise
                continue  # "may": left off, more, never less
            out.append(("(?!" if av[0] == 1 else "(?<!") + inner + ")")
        else:  # back-references, and in "must" atomic or possessive parts
            raise _NoRewrite(name)
    return "".join(out)


def _class_text(av, unknown: type[Exception] = _NoRewrite) -> str:
    """A character class as regex text (`unknown` raised for an item it cannot write)."""
    neg, body = "", []
    for op, x in av:
        name = str(op)
        if name == "NEGATE":
            neg = "^"
        elif name == "LITERAL":
            body.append(re.escape(chr(x)))
        elif name == "RANGE":
            body.append(re.escape(chr(x[0])) + "-" + re.escape(chr(x[1])))
        elif name == "CATEGORY":
            body.append(_CAT[str(x)])
        else:
            raise unknown(name)
    return "[" + neg + "".join(body) + "]"


@functools.lru_cache(maxsize=4096)
def _marks_rx(source: str, must: bool) -> re.Pattern[str] | None:
    """The pattern rewritten to read _X and _Y marks ("may" or "must"), compiled; None when
    it cannot be (the caller then cannot judge the key)."""
    try:
        parsed = sre_parse.parse(source)
        flags = parsed.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.ASCII)
        if flags & re.ASCII:  # the marks would not be word characters
            return None
        return re.compile(_marks_seq(list(parsed), flags, must), flags)
    except (_NoRewrite, ValueError, KeyError, re.error, RecursionError):
        return None


def _exposed(lit: str) -> bool:
    """Whether a rule literal (norm_text'ed) could overlap a hex id of a line: it holds a run
    of hex characters that may touch an id's edge (an id stands between non-word characters,
    or after "0x")."""
    for m in re.finditer(r"[0a-f]+", lit):
        a, b = m.start(), m.end()
        left = a == 0 or not (lit[a - 1].isalnum() or lit[a - 1] == "_") or lit[a - 1] == "x"
        right = b == len(lit) or not (lit[b].isalnum() or lit[b] == "_")
        if left and right:
            return True
    return False
