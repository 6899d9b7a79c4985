"""A TOML document's nesting, measured before ``tomllib`` parses it.

``tomllib`` is quadratic in the parts of a dotted key (``a.a.a... = 1``:
it builds and hashes every prefix of the key), so one 400 KB line of
200,000 parts runs past a minute and 30,000 parts exhaust 1.5 GB of
address space; its arrays and inline tables recurse. :func:`check_nesting`
reads the text once, in linear time, and refuses the first place nested
deeper than a limit -- the parts of the table header a key is under, plus
the parts of the dotted key, plus the arrays and inline tables around a
value -- in one line naming the file, the line and the limit. Every reader
of a user's TOML file asks it before ``tomllib`` does: the oracle's
(``oracle.bounded.load_document``) and the engine's layout file
(``engine.layout.load_file``).

It imports nothing of the project (docs/DESIGN.md §2): the engine and the
oracle both ask it.
"""

from __future__ import annotations

import re

__all__ = ["MAX_NESTING", "check_nesting"]

#: The most levels a value of a user's TOML file may sit at (a real file
#: of this project uses at most four).
MAX_NESTING = 64

#: What matters where a key is read (dots split it) and where a value is.
_IN_KEY = re.compile(r"[\n\"'#\[\]{}=,.]")
_IN_VALUE = re.compile(r"[\n\"'#\[\]{}=,]")
#: A run of characters that cannot end a basic string (one-line, multi-line).
_PLAIN = {'"': re.compile(r'[^"\\\n]*'), '"""': re.compile(r'[^"\\]*')}
_LITERAL = re.compile(r"[^'\n]*'")


def _string_end(text: str, pos: int, opening: str) -> int:
    """Where the string ``opening`` opened (just before ``pos``) ends; -1 if
    it does not.  Each step is a run of plain characters or one escape:
    linear in the text (a regex alternation keeps state per character)."""
    if opening == "'":
        m = _LITERAL.match(text, pos)
        return -1 if m is None else m.end()
    if opening == "'''":
        at = text.find(opening, pos)
        if at < 0:
            return -1
    else:
        plain = _PLAIN[opening]
        while True:
            at = plain.match(text, pos).end()
            if at >= len(text) or text[at] == "\n":
                return -1
            if text[at] == "\\":
                pos = at + 2
            elif len(opening) == 1 or text.startswith(opening, at):
                break
            else:  # one or two quotes inside a multi-line string
                pos = at + 1
    at += len(opening)
    if len(opening) == 3:  # a multi-line string's last quotes may be its own
        for _ in range(2):
            at += text.startswith(opening[0], at)
    return at


def _refuse(where: str, line: int, limit: int) -> ValueError:
    return ValueError(f"{where}: line {line}: nested deeper than the limit of "
                      f"{limit} levels (dotted keys, tables, arrays and inline "
                      "tables)")


def check_nesting(text: str, where: str, limit: int = MAX_NESTING) -> None:
    """Refuse ``text`` (the TOML file ``where``) nested deeper than ``limit``.

    Raises ValueError "WHERE: line N: nested deeper than the limit of L
    levels (dotted keys, tables, arrays and inline tables)" at the first
    place past it: the parts of the table header a key is under, plus the
    parts of the key, plus the arrays and inline tables around its value.
    Anything else wrong is left to the parser: a string left open ends the
    measure.
    """
    line, pos, end = 1, 0, len(text)
    stack: list[tuple[str, int]] = []  # open arrays, inline tables: level
    header = 0  # parts of the current [table] header
    in_key, in_header = True, False
    base, parts = 0, 1  # the key being read: its first level, its parts
    depth = 0  # the level of the value being read
    while pos < end:
        m = (_IN_KEY if in_key or in_header else _IN_VALUE).search(text, pos)
        if m is None:
            return
        c, pos = m.group(), m.end()
        if c == "\n":
            line += 1
            if not stack:
                in_key, in_header, base, parts = True, False, header, 1
        elif c == "#":
            nl = text.find("\n", pos)
            pos = end if nl < 0 else nl
        elif c in "\"'":
            opening = c * 3 if text.startswith(c * 2, pos) else c
            pos += len(opening) - 1
            close = _string_end(text, pos, opening)
            if close < 0:
                return  # not valid TOML: the parser says where
            line += text.count("\n", pos, close)
            pos = close
        elif c == ".":  # searched for in a key or a header alone
            parts += 1
            if base + parts > limit:
                raise _refuse(where, line, limit)
        elif c == "=" and in_key and not in_header:
            in_key, depth = False, base + parts
            if depth > limit:
                raise _refuse(where, line, limit)
        elif c == "[" and not in_key and not in_header:  # an array: a level
            depth += 1
            if depth > limit:
                raise _refuse(where, line, limit)
            stack.append((c, depth))
        elif c == "{" and not in_key and not in_header:  # its keys: levels
            stack.append((c, depth))
            in_key, base, parts = True, depth, 1
        elif c == "[" and not stack and in_key:  # [table] or [[array.of]]
            in_header, base, parts = True, 0, 1
            if text.startswith("[", pos):
                pos += 1
        elif c == "]" and in_header:
            in_header, in_key, header = False, False, parts
        elif c in "]}" and stack:
            stack.pop()
            in_key = False
            depth = stack[-1][1] if stack else 0
        elif c == "," and stack:
            if stack[-1][0] == "{":
                in_key, base, parts = True, stack[-1][1], 1
            else:
                depth = stack[-1][1]
