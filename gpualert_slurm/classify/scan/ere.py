"""The rules' regexes as EREs for GNU grep (LC_ALL=C grep -a -E, over a line's raw bytes).

Each pattern of a rule becomes EREs that match at least every line the regex matches: literals,
ASCII classes and repeats kept; lookarounds, anchors and what cannot be translated left out; a
newline, which no line holds, as any byte; case-sensitive where the rule is; each starts at a
literal and at its rarest character (_spread and _rare_start: grep's automaton is fast only
between pattern starts), so grep prints only the lines a rule can match. Python then confirms
each line with the rule's own regex.
"""

from __future__ import annotations

import re
from re import _parser as sre_parse  # type: ignore[attr-defined]  # literal parts for grep

from gpualert_slurm.classify.rules import MIN_LITERAL, Rule

# characters whose lower() holds an ASCII letter (re's IGNORECASE and str.lower() match them to
# ASCII letters; grep's [xX] classes in the C locale do not): lines holding them always print
_FOLDS_TO_ASCII = ("\u0130", "\u0131", "\u017f", "\u212a")


def _ere_char(ch: str, icase: bool = False) -> str:
    if ch == "/":
        return "[/\\]"  # clean_text reads "\" as "/"
    if icase and ch.isascii() and ch.isalpha():
        return f"[{ch.lower()}{ch.upper()}]"
    if ch.isalnum() or ch == " ":
        return ch
    return {"]": "[]]", "^": "\\^", "\\": "[\\]"}.get(ch, f"[{ch}]")


def _ere_wide(ch: str) -> str:
    """A non-ASCII literal character of a rule's literals, as its UTF-8 bytes (the literal
    is lower-cased: either case, as an alternation; "." for one whose case forms differ in
    length): a rule of CJK, Hangul or Cyrillic words (the shell's "Killed" in the locale's
    words) keeps a narrow ERE, not "..."."""
    if ch == "\n":
        return "."
    forms = {ch, ch.lower(), ch.upper()}
    if any(len(f) != 1 for f in forms):
        return "."
    return ch if len(forms) == 1 else "(" + "|".join(sorted(forms)) + ")"


_HI = "\x80-\xff"  # the bytes of a non-ASCII character (grep reads bytes: LC_ALL=C)
_CATEGORY = {"CATEGORY_DIGIT": "0-9", "CATEGORY_SPACE": "\t\x0b\x0c\r \x1c-\x1f",
             "CATEGORY_WORD": "A-Za-z0-9_"}  # plus, in str regexes, non-ASCII characters


def _bracket(neg: bool, chars: set[str], ranges: list[str]) -> str:
    if "/" in chars:
        chars.add("\\")  # clean_text reads "\" as "/"
    body = ("]" if "]" in chars else "") + "".join(sorted(chars - {"]", "^", "-"})) \
        + "".join(ranges)
    body += ("^" if "^" in chars else "") + ("-" if "-" in chars else "")
    if body == "^":
        return "\\^" if not neg else "[^^]"
    return "[" + ("^" if neg else "") + body + "]"


def _ere_class(op: str, av, icase: bool = False) -> tuple[str, bool] | None:
    """A one-character regex item as a byte class, and whether it may match a non-ASCII
    character (then it takes 1 to 4 bytes); None: not a one-character item. `icase`: the
    regex ignores case here (grep does not: both cases are in the class)."""
    # grep's lines hold no newline: a newline in a class is left out, a newline alone is "."
    if op == "LITERAL":
        if av == 10:
            return ".", False
        return (_ere_char(chr(av), icase), False) if av < 128 else ("[" + _HI + "]", True)
    if op == "NOT_LITERAL":
        return (_bracket(True, {chr(av)}, []), True) if av < 128 and av != 10 else (".", True)
    if op == "ANY":
        return ".", True
    if op != "IN":
        return None
    neg, chars, ranges, wide = False, set(), [], False
    for iop, iav in av:
        name = str(iop)
        if name == "NEGATE":
            neg = True
        elif name == "LITERAL" and iav == 10:
            continue
        elif name == "LITERAL" and iav < 128:
            chars.add(chr(iav))
            if icase and not neg:
                chars |= {chr(iav).lower(), chr(iav).upper()}
        elif name == "RANGE" and iav[1] < 128:
            lo, hi = chr(iav[0]), chr(iav[1])
            if lo in "]^-\\" or hi in "]^-\\":
                return ".", True  # an odd range: any character (more, never less)
            ranges.append(lo + "-" + hi)
            if icase and not neg and any(c.isalpha() for c in map(chr, range(iav[0], iav[1] + 1))):
                ranges += ["a-z", "A-Z"]  # (a negated class stays: it excludes less)
        elif name == "CATEGORY" and str(iav) in _CATEGORY:
            ranges.append(_CATEGORY[str(iav)])
            wide = True
        else:  # a non-ASCII member, a negated category: any character
            return ".", True
    if not chars and not ranges:  # only a newline: no line holds one
        return ".", True
    if neg:  # every byte of a non-ASCII character is outside a negated ASCII class
        return (_bracket(True, chars, ranges) if not wide else "."), True
    if wide:
        ranges.append(_HI)
    return _bracket(False, chars, ranges), wide


def _icase(icase: bool, group) -> bool:
    """Whether a group ignores case: (?i:...) turns it on, (?-i:...) off."""
    add, drop = group[1], group[2]
    return bool((icase or add & re.IGNORECASE) and not drop & re.IGNORECASE)


def _ere_seq(items, top: bool = False, icase: bool = False) -> str:
    """An ERE (for LC_ALL=C grep -E, over a line's raw bytes) matching at least every text
    the parsed regex sequence matches: literals, ASCII classes and repeats as they are; a
    class that may match a non-ASCII character as 1 to 4 bytes; zero-width items dropped, what
    is not translated (back-references) as ".*". `top`: the whole pattern, searched anywhere
    in a line: what comes before its first and after its last literal part is left off (more
    lines match, never fewer; grep's automaton is much faster without leading classes).
    `icase`: the regex ignores case (letters become [xX]; inline (?i:...) groups too)."""
    out: list[tuple[str, bool]] = []  # (ERE, a literal part: a char or a group of them)
    for op, av in items:
        name = str(op)
        one = _ere_class(name, av, icase)
        if one is not None:
            out.append((one[0] + ("{1,4}" if one[1] else ""),
                        name == "LITERAL" and av < 128 and av != 10))
        elif name == "SUBPATTERN":
            inner = _ere_seq(list(av[-1]), icase=_icase(icase, av))
            if inner:
                out.append(("(" + inner + ")", True))
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            lo, hi, body = av[0], av[1], list(av[2])
            one = _ere_class(str(body[0][0]), body[0][1], icase) if len(body) == 1 else None
            if one is not None:
                item, wide = one
            else:
                inner = _ere_seq(body, icase=icase)
                if not inner:
                    continue
                item, wide = "(" + inner + ")", False
            if not wide and hi <= 16:
                out.append((item + f"{{{lo},{hi}}}", False))
            else:  # an unbounded, long or byte-width-varying repeat: at least as many
                out.append((item + ("*" if lo == 0 else "+"), False))
        elif name == "BRANCH":
            alts = [_ere_seq(list(alt), icase=icase) for alt in av[1]]
            if all(alts):
                out.append(("(" + "|".join(alts) + ")", True))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue  # zero width: dropping it matches more, never less
        else:
            out.append((".*", False))
    if top:
        lit = [i for i, (_, is_lit) in enumerate(out) if is_lit]
        out = out[lit[0] : lit[-1] + 1] if lit else []
    return "".join(e for e, _ in out)


# The printable characters of training logs from the most common (counted over the corpus's
# logs). grep's automaton runs fast while it stays in its start state and slowly from each byte
# that can start a pattern, so a pattern is given to grep from its rarest character on (the
# rest of it is a superset: Python decides), as long as CUT_KEEP letters and digits are left
# (grep still prints few lines); uppercase letters are rare, and grep is case-sensitive where
# the rule is.
_COMMON = (" seotr0al.i1ncp2/34:6'5d^mh78,u9g=_|][-kbfywIv\"E()CNT{}FLGAUxDR>BSPO*W<zqZ+#`~MHVj"
           "\\%&KX;!YJ@?Q")
CUT_KEEP = 8


def _rank(ch: str, icase: bool) -> int:
    """How rare a character is in logs (higher: rarer); either case counts when ignored."""
    ranks = [_COMMON.find(c) for c in ({ch.lower(), ch.upper()} if icase else {ch})]
    return min(len(_COMMON) if r < 0 else r for r in ranks)


def _rare_start(items: list, icase: bool) -> tuple[list, bool]:
    """The parsed regex sequence from its rarest top-level literal character on, keeping at
    least CUT_KEEP letters and digits (a pattern that is one group: its inside); and whether
    that ignores case."""
    while len(items) == 1 and str(items[0][0]) == "SUBPATTERN":
        icase = _icase(icase, items[0][1])
        items = list(items[0][1][-1])
    left = sum(1 for op, av in items if str(op) == "LITERAL" and av < 128 and chr(av).isalnum())
    # an unbounded repeat after the start keeps the automaton out of its start state to the
    # line's end: a start past the last one is better than a rarer character before it
    loops = [i for i, (op, av) in enumerate(items)
             if str(op) in ("MAX_REPEAT", "MIN_REPEAT") and av[1] == sre_parse.MAXREPEAT]
    best, rarest = 0, (-1, -1)
    for i, (op, av) in enumerate(items):
        if str(op) != "LITERAL" or av >= 128 or av == 10:
            continue
        if left < CUT_KEEP:
            break
        rank = (not loops or i > loops[-1], _rank(chr(av), icase))
        if rank > rarest:
            best, rarest = i, rank
        if chr(av).isalnum():
            left -= 1
    while best + 1 < len(items) and items[best] == (sre_parse.LITERAL, ord(" ")):
        best += 1  # the most common byte of all: never where grep's patterns start
    return items[best:], icase


def _spread(items: list, icase: bool, budget: int = 16) -> list[tuple[list, bool]]:
    """The parsed regex sequence as one or more sequences, one of which every match holds,
    whose heads are literal where the regex's is not: what leads without being needed (zero
    width, optional, a class) is left off, a leading repeated group is taken once (its last
    time), and a leading alternation is spread over its alternatives (at most `budget`)."""
    while items:
        op, av = items[0]
        name = str(op)
        if name == "SUBPATTERN":
            inner = list(av[-1])
            if _icase(icase, av) != icase:
                break
            if len(inner) == 1 and str(inner[0][0]) == "BRANCH":
                items = [inner[0], *items[1:]]
                continue
            items = inner + items[1:]
        elif name == "BRANCH":
            alts = av[1]
            if any(not _spread([*alt], icase)[0][0] for alt in alts):
                items = items[1:]  # an alternative needs nothing: the rest alone is searched
                continue
            if len(alts) > budget:
                break
            out: list[tuple[list, bool]] = []
            for alt in alts:
                out += _spread([*alt, *items[1:]], icase, budget // len(alts))
            return out
        elif name in ("MAX_REPEAT", "MIN_REPEAT") and av[0] >= 1:
            items = [*av[2], *items[1:]]
        elif name == "LITERAL":
            break
        else:  # zero width, optional, a class: not needed by a search for the rest
            items = items[1:]
    return [(items, icase)]


def grep_patterns(rules: list[Rule]) -> list[bytes]:
    """EREs (for LC_ALL=C grep -E, GREP_MATCH) of which one matches every line a pattern of
    `rules` can match after clean_text: per pattern, its literal parts in order joined by ".*"
    (the rest of the regex left to Python), or, when those are too short, the pattern's own
    prefilter literals (digits as [0-9], "error\n" as "error" then no letter or digit). Lines
    holding what clean_text removes or a character whose case folds to ASCII are always
    candidates."""
    out = {b"[*][*]", b"`", b"\x1b", b"\x08"} | {c.encode() for c in _FOLDS_TO_ASCII}
    for r in rules:
        for i, pat in enumerate(r.patterns):
            heads = _spread(list(sre_parse.parse(pat.pattern, pat.flags)),
                            bool(pat.flags & re.IGNORECASE))
            eres = [_ere_seq(cut, top=True, icase=ic)
                    for cut, ic in (_rare_start(items, icase) for items, icase in heads)]
            if all(len(re.sub(r"[^A-Za-z]", "", ere)) >= MIN_LITERAL for ere in eres):
                out.update(ere.encode("latin-1") for ere in eres)
                continue
            for lit in r.plits[i] if i < len(r.plits) else ():
                at_end = lit.endswith("\n")
                body = lit.rstrip("\n").lstrip(" ") or lit.rstrip("\n")
                rx = "".join("[0-9]" if ch == "0" else _ere_char(ch, True)  # (either case)
                             if ch.isascii() and ch != "\n" else _ere_wide(ch) for ch in body)
                out.add((rx + ("[^A-Za-z0-9]*$" if at_end else "")).encode())
    return sorted(out)
