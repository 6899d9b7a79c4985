"""The reader differential: seeded corruptions of headers and indexes, engine vs oracle.

Each replay writes a few hundred small containers, each one valid container
broken in one place by a rule drawn from a seed, and opens every one with
the engine's C reader (``engine.Container``) and the oracle's reader
(``oracle.safetensors``).  The two must give the same verdict, field by
field:

- accept or refuse, and when both accept the same tensor table (name,
  dtype, shape, shard, offset, size) and metadata;
- the same error kind (:data:`KIND_DIFFERENCES` lists the pairs the two
  readers may legitimately name, each with its rule; none where the
  corruption is the file's only problem and fixes the kind);
- the byte offset of the error record by the engine's convention
  (docs/DESIGN.md §3's table): the corruption knows what it broke and
  where, because the header is written here with every key's and value's
  byte position recorded (:class:`Doc`); the oracle's own offset where
  both readers follow one rule;
- the message names the file the oracle names, the tensor the oracle names
  (as ``"name"``, its first 200 bytes), every number of the oracle's
  detail (the sizes, ends and counts of a ``size``, ``length`` or
  ``offsets`` error), and the words the corruption knows (how a bad escape
  or surrogate is printed, what a json error found at its offset);
- each shard's data start (8 + N) when both accept.

The rules (:data:`HEADER_RULES`, :data:`INDEX_RULES`) cover every check of
§3 -- the length prefix and the file's extent, UTF-8, JSON syntax and
numbers, the entry schema field by field, dtypes, duplicates, ``__metadata__``,
the data offsets, overflow, bits, size, the buffer's length -- and the
index's promises (unknown and missing entries, a wrong shard, a missing
shard, ``total_size``, the ``weight_map`` schema), plus random byte edits
of the header text whose verdict and kind must agree.  A parser or error
path bug that changes any verdict or any field of an error fails the
gate's ``reader-diff`` checks, with the first disagreement named.

The format's edges are drawn as classes, each file's verdict for each
reader derived from docs/DESIGN.md's order, not from either reader
(:mod:`~gate.reader_diff.plan`): every two faults in one header, in both
orders, in one entry, in a duplicated name's first or second occurrence,
adjacent or 16 and 17 entries apart (the look-ahead of the engine's batched
duplicate check), in the C reader's fast-path spelling and its general
one; every dimension and offset at the limits of 48, 53 and 64 bits, beside
a zero dimension too, and integers spelled with a leading zero, a sign, an
exponent, a fraction; 0 to 9 dimensions; and the container's edges
(shards whose ``__metadata__`` differ, a ``weight_map`` naming a shard
outside the index's folder, symlinks, ``total_size`` spelled every way).
Where the two readers' documented orders differ (steps 6-9: check-major
against tensor by tensor, docs/DESIGN.md §5), each is held to its own.

The package's modules, in the order of a run:

- :mod:`~gate.reader_diff.doc`: JSON written with every byte position kept;
- :mod:`~gate.reader_diff.containers`: the valid containers the rules break;
- :mod:`~gate.reader_diff.generators`: the drawn names, values and numbers
  (escapes and UTF-8 of every length class, valid and not; nested,
  malformed and non-JSON values; numbers straddling the largest double for
  every significand width);
- :mod:`~gate.reader_diff.header_rules`, :mod:`~gate.reader_diff.index_rules`:
  the hand corruptions; :mod:`~gate.reader_diff.drawn`: the corruptions on
  the generators, and the sweep of one file per class of each;
- :mod:`~gate.reader_diff.plan`: a header built entry by entry (each
  entry and field found by identity once every change is made) and each
  reader's verdict on it by the documented order, and the judge holding
  both to it; :mod:`~gate.reader_diff.combined`: every two faults in one
  header; :mod:`~gate.reader_diff.edges`: the numbers at their limits and
  their spellings; :mod:`~gate.reader_diff.folders`: the container's edges;
- :mod:`~gate.reader_diff.paths`: the path and folder probes (missing
  paths, an empty folder, an index past the size limit, paths shorter than
  the ``.json`` suffix, opened through the C face);
- :mod:`~gate.reader_diff.compare`: both verdicts and the comparison:
  each shard's data start, and the message facts (the quoted name cut at
  200 bytes as C's ``%.200s`` cuts it, what a json error says it found at
  its offset);
- :mod:`~gate.reader_diff.runner`: the run and its check lines
  (``reader-diff-headers``, ``-indexes``, ``-sweeps``: the classes above
  are in the sweeps).
"""

from xcache.gate.reader_diff.compare import (
    KIND_DIFFERENCES,
    NAME_COMPARED,
    NUMBERS_COMPARED,
    Verdict,
    compare,
    engine_verdict,
    named_tensor,
    oracle_verdict,
)
from xcache.gate.reader_diff.containers import (
    INDEX_NAME,
    SHARDED,
    SINGLE,
    Header,
    Sharded,
    base_sharded,
    base_single,
)
from xcache.gate.reader_diff.doc import Doc, Obj, Raw, render
from xcache.gate.reader_diff.header_rules import HEADER_RULES, Expect
from xcache.gate.reader_diff.index_rules import INDEX_RULES
from xcache.gate.reader_diff.runner import (
    DEFAULT_CASES,
    DEFAULT_SEED,
    Outcome,
    header_cases,
    index_cases,
    run_checks,
)

__all__ = [
    "DEFAULT_CASES", "DEFAULT_SEED", "HEADER_RULES", "INDEX_NAME", "INDEX_RULES",
    "KIND_DIFFERENCES", "NAME_COMPARED", "NUMBERS_COMPARED", "SHARDED", "SINGLE",
    "Doc", "Expect", "Header", "Obj", "Outcome", "Raw", "Sharded", "Verdict",
    "base_sharded", "base_single", "compare", "engine_verdict", "header_cases",
    "index_cases", "named_tensor", "oracle_verdict", "render", "run_checks",
]
