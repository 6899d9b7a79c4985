"""Mutation testing of the engine: a catalogue of planted bugs and their runner.

``python -m xcache.faults.mutants`` plants each mutant of
:mod:`faults.mutants.catalogue`
in a scratch copy of the engine, re-pins and replays it exactly as CI gates a
candidate, and reports which checks caught it (:mod:`faults.mutants.run`).
"""

from xcache.faults.mutants.catalogue import (
    CATALOGUE,
    CONTRACTS,
    KNOWN_SURVIVORS,
    Mutant,
    NotApplicable,
    apply_mutant,
)

__all__ = ["CATALOGUE", "CONTRACTS", "KNOWN_SURVIVORS", "Mutant", "NotApplicable",
           "apply_mutant"]
