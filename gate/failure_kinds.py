"""A failure of either project backend, named in the words of ``faults.kinds``.

The engine's exceptions and the oracle's are named by ``faults.kinds``; the
failures only the oracle's reading cache has a class for
(:class:`oracle.call_outcomes.ModelOnlyFailure`: a file changed, no memory)
carry their kind themselves.
"""

from __future__ import annotations

from xcache.oracle.call_outcomes import ModelOnlyFailure


def kind_of(exc: BaseException) -> str:
    """The failure kind of either backend's exception (faults.kinds)."""
    if isinstance(exc, ModelOnlyFailure):
        return exc.kind
    # lazily: faults.kinds imports the engine, which the gate imports only
    # once gate.build.load_engine chose the tree (gate/__init__.py)
    from xcache.faults.kinds import kind_of as faults_kind_of  # noqa: PLC0415

    kind = faults_kind_of(exc)
    if kind.startswith("other:"):
        raise exc
    return kind
