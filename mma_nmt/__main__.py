"""``python -m mma_nmt ...`` is the ``mma-nmt`` command line (see ``mma_nmt.cli.main``)."""

import sys

from mma_nmt.cli.main import main

sys.exit(main())
