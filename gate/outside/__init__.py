"""Outside caches under test: an adapter folder, its build and its backend.

An adapter folder holds ``xcs.toml`` (the manifest: the cache's source
files with their SHA-256 digests, compiler flags, the shim file and the
capability declaration) and a C shim implementing ``xcs_shim.h`` of this
package.  :mod:`gate.outside.build` checks the digests and compiles the
sources unchanged with the shim through cffi; :mod:`gate.outside.backend`
drives the result as a :class:`gate.backend_api.Backend`;
:mod:`gate.outside.conformance` runs the scenarios against it (the oracle
the judge) and writes the conformance report.  docs/OUTSIDE_CACHES.md is
the step-by-step page.
"""

from pathlib import Path

#: this package's folder, where ``xcs_shim.h`` lives
HERE = Path(__file__).resolve().parent

#: the manifest's file name inside an adapter folder
MANIFEST_NAME = "xcs.toml"
