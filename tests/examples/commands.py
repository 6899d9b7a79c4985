"""Run the commands a page shows, as a user would type them.

A page's commands start with ``python`` (this interpreter) or with one of
the console scripts ``pyproject.toml`` declares (``xcache-replay``, ...),
run through the entry point it names, so they need no installed copy.
"""

from __future__ import annotations

import re
import shlex
import sys

from tests.helpers import ROOT

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib


def scripts() -> dict[str, str]:
    """Console script name -> ``module:function``, from pyproject.toml."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"]["scripts"])


def argv_of(command: str, subst: dict[str, str] | None = None) -> list[str]:
    """The argv that runs ``command`` (words in ``subst`` replaced)."""
    words = [(subst or {}).get(w, w) for w in shlex.split(command)]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    module, func = scripts()[words[0]].split(":")
    return [sys.executable, "-c",
            f"import sys; from {module} import {func}; sys.exit({func}())",
            *words[1:]]


def console_blocks(text: str) -> list[list[tuple[str, str]]]:
    """Each ```console block of ``text`` as (command, expected output) pairs."""
    blocks = []
    for body in re.findall(r"```console\n(.*?)```", text, re.S):
        pairs: list[tuple[str, list[str]]] = []
        for line in body.splitlines():
            if line.startswith("$ "):
                pairs.append((line[2:], []))
            else:
                pairs[-1][1].append(line)
        blocks.append([(c, "\n".join(out) + "\n") for c, out in pairs])
    return blocks
