"""docs/QUICKSTART.md is run as written: its commands, then its `>>>` lines.

Each ```console block's `$` lines run in order from the checkout root
(the `xcache-*` commands as pyproject.toml's console scripts declare them)
and print what the page shows (`...` stands for any text); the `>>>`
examples then run as a doctest.  The page's folder
`/tmp/xcache-quickstart` becomes a fresh temporary folder.
"""

from __future__ import annotations

import doctest
import os
import subprocess
from pathlib import Path

from tests.examples.commands import argv_of, console_blocks
from tests.helpers import ROOT

PAGE = ROOT / "docs" / "QUICKSTART.md"
PLACE = "/tmp/xcache-quickstart"
FLAGS = doctest.ELLIPSIS


def run_commands(text: str, cwd: Path, env: dict[str, str]) -> int:
    """Run every console command of ``text``; assert each output; the count."""
    checker, n = doctest.OutputChecker(), 0
    for block in console_blocks(text):
        for command, want in block:
            p = subprocess.run(argv_of(command), cwd=cwd, env=env, timeout=900,
                               capture_output=True, text=True)
            assert p.returncode == 0, (command, p.stdout, p.stderr)
            assert checker.check_output(want, p.stdout, FLAGS), (
                command, want, p.stdout)
            n += 1
    return n


def test_quickstart_runs_as_written(tmp_path):
    """Every command prints what the page shows; every `>>>` line passes."""
    text = PAGE.read_text("utf-8").replace(PLACE, str(tmp_path / "qs"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    assert run_commands(text, ROOT, env) == 6
    test = doctest.DocTestParser().get_doctest(text, {}, "QUICKSTART.md",
                                               str(PAGE), 0)
    assert len(test.examples) == 16
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted == 16


def test_quickstart_is_linked_from_the_readme_first_screen():
    """The README names docs/QUICKSTART.md in its first 25 lines."""
    head = (ROOT / "README.md").read_text("utf-8").splitlines()[:25]
    assert any("docs/QUICKSTART.md" in line for line in head)
