"""Mutation testing of the engine: a catalogue of planted bugs and their runner.

``python -m xcache.hunt.mutants`` plants each mutant of
:mod:`hunt.mutants.catalogue`
in a scratch copy of the engine, re-pins and replays it exactly as CI gates a
candidate, and reports which checks caught it (:mod:`hunt.mutants.run`).
"""

from xcache.hunt.mutants.catalogue import (
    CATALOGUE,
    CONTRACTS,
    KNOWN_SURVIVORS,
    Mutant,
    NotApplicable,
    apply_mutant,
)

__all__ = ["CATALOGUE", "CONTRACTS", "KNOWN_SURVIVORS", "Mutant", "NotApplicable",
           "apply_mutant"]
