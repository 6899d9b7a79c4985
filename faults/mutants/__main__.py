"""``python -m xcache.faults.mutants``: run the engine mutation catalogue."""

import sys

from xcache.faults.mutants.run import main

sys.exit(main())
