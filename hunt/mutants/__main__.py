"""``python -m xcache.hunt.mutants``: run the engine mutation catalogue."""

import sys

from xcache.hunt.mutants.run import main

sys.exit(main())
