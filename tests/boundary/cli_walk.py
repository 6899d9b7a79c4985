"""The walk over every tool's argparse parser the boundary tests share: each
command's parser, its required values, its Output and Input options, and
an argv built from them (tests/boundary/test_one_writer_one_reader.py,
test_one_reader_limits.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from xcache.fixtures.ownership import marked_options


class _Caught(Exception):
    """Carries the parser a ``main()`` built, caught at its ``parse_args``."""


def _parser_of(main: Callable[[list[str]], Any]) -> argparse.ArgumentParser:
    """The parser ``main`` builds inside itself (caught at ``parse_args``)."""
    real = argparse.ArgumentParser.parse_args

    def catch(self: argparse.ArgumentParser, *a: Any, **k: Any) -> Any:
        raise _Caught(self)

    argparse.ArgumentParser.parse_args = catch  # type: ignore[method-assign]
    try:
        main([])
    except _Caught as c:
        return c.args[0]
    finally:
        argparse.ArgumentParser.parse_args = real  # type: ignore[method-assign]
    raise AssertionError(f"{main} parsed nothing")


def _commands() -> dict[str, tuple[argparse.ArgumentParser, list[str],
                                   Callable[[list[str]], int], dict[str, str]]]:
    """label: (parser, argv prefix, runner, base value of each required dest)."""
    from xcache import data
    from xcache.engine import inspector
    from xcache.fixtures import __main__ as fx
    from xcache.gate import cli as gate
    from xcache.lab import cli as lab
    from xcache.lab.predict import cli as predict
    from xcache.lab.timing import cli as timing

    trace = {"trace": "@INPUT", "outdir": "@OUT"}
    out = {
        "gate": (gate.parser("replay.py"), [], gate.run,
                 {"dir": "@OUT", "programs_file": "@INPUT"}),
        "lab": (lab.parser(), [], lab.run, trace),
        "predict": (predict.parser(), [], predict.run, trace),
        "time": (timing.parser(), [], timing.run, trace),
        "inspect": (_parser_of(inspector.main), [], inspector.main,
                    {"path": "@INPUT"}),
        "data": (_parser_of(data.main), [], data.main, {}),
    }
    top = fx._parser()
    sub = next(a for a in top._actions if isinstance(a.choices, dict))
    base = {"new": {"spec": "@INPUT", "out": "@OUT"},
            "verify": {"dir": "@INPUT"},
            "from-header": {"src": "@INPUT", "out": "@OUT"},
            "checkpoint": {"description": "@INPUT", "out": "@OUT"},
            "identify": {"container": "@INPUT", "file": "@INPUT"}}
    for name, p in sub.choices.items():
        out[f"fixtures {name}"] = (p, [name], fx.main, base[name])
    return out


#: Path options no mark can reach, and why.
UNMARKED = {
    ("inspect", "path"): "the engine imports nothing of the project "
                         "(engine/regular.py is its reader)",
    ("inspect", "layout"): "the engine imports nothing of the project",
}


def _outputs() -> list[tuple[str, str]]:
    """(command, dest) of every Output option."""
    return [(label, a.dest) for label, (p, *_r) in _commands().items()
            for a in marked_options(p, "xcache_output")]


def _inputs() -> list[tuple[str, str]]:
    """(command, dest) of every Input option, and the unmarked ones."""
    return [(label, a.dest) for label, (p, *_r) in _commands().items()
            for a in p._actions
            if getattr(a.type, "xcache_input", False) or (label, a.dest) in UNMARKED]


def _argv(label: str, override: dict[str, str], paths: dict[str, str]) -> list[str]:
    """The command's argv: its base values, ``override`` on top."""
    parser, prefix, _run, base = _commands()[label]
    values = {**base, **override}
    argv = list(prefix)
    for a in parser._actions:
        v = values.get(a.dest)
        if v is None:
            continue
        v = paths.get(v, v)
        argv += [v] if not a.option_strings else [a.option_strings[0], v]
    return argv
