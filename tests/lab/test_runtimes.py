"""Each lab says, in its --help, the front door's list, README.md and
docs/QUICKSTART.md alike, the command to try on the shipped trace and how
long it took here (lab/runtimes.py is the one table)."""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT
from xcache import data
from xcache.lab import cli as lab_cli
from xcache.lab.predict import cli as predict_cli
from xcache.lab.runtimes import MACHINE, RUNTIMES, TRACE
from xcache.lab.timing import cli as time_cli

PARSERS = {"lab": lab_cli.parser, "predict": predict_cli.parser,
           "time": time_cli.parser}
SUMMARIES = {"lab": lab_cli.SUMMARY, "predict": predict_cli.SUMMARY,
             "time": time_cli.SUMMARY}


def flat(text: str) -> str:
    """``text`` with every run of white space one space (argparse wraps lines)."""
    return re.sub(r"\s+", " ", text)


def test_the_table_covers_the_three_labs_on_the_shipped_trace():
    """lab, predict and time each have a command on olmoe_299, by name, and a time."""
    assert sorted(RUNTIMES) == ["lab", "predict", "time"]
    for name, r in RUNTIMES.items():
        assert r.command.startswith(f"replay.py {name} {TRACE} /tmp/{name}")
        assert 0 < r.seconds < 60
    assert data.resolve("trace", TRACE) == ROOT / "fixtures/traces/olmoe_299.jsonl"


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_help_gives_the_command_and_its_time(name):
    """A lab's --help names its example command, its seconds and the machine."""
    text = flat(PARSERS[name]().format_help())
    r = RUNTIMES[name]
    assert f"{r.command} takes about {r.seconds:g} s on {MACHINE}" in text
    assert f"about {r.seconds:g} s on {TRACE}" in SUMMARIES[name]


@pytest.mark.parametrize("page", ["README.md", "docs/QUICKSTART.md"])
def test_the_docs_give_the_same_commands_and_times(page):
    """README and QUICKSTART run each lab as the table does and quote its time."""
    text = (ROOT / page).read_text("utf-8")
    for r in RUNTIMES.values():
        command = r.command.replace("replay.py", "xcache-replay", 1)
        assert text.count(command) == 1, (page, command)
        at = text.index(command)
        near = flat(text[max(0, at - 200):at + len(command) + 200])
        assert f"about {r.seconds:g} s" in near, (page, command)
    assert "2-core Intel Xeon VM" in flat(text)
