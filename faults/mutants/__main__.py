"""``python -m faults.mutants``: run the engine mutation catalogue."""

import sys

from faults.mutants.run import main

sys.exit(main())
