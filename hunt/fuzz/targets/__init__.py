"""The tool fuzzer's targets, one module per group (hunt/fuzz/tools.py runs them).

Each module has ``TARGETS`` (its :class:`hunt.fuzz.case.Target` rows:
the command and the seed files it needs) and ``STRATEGIES`` (target name
to the hypothesis strategy drawing its cases): :mod:`.containers`
(engine.inspector, the gate's container step), :mod:`.fixtures`
(``python -m xcache.fixtures``), :mod:`.traces` (lab, predict),
:mod:`.gate_files` (scenario and programs files) and :mod:`.models`
(``fixtures checkpoint``'s description, the time lab's model and trace).
"""
