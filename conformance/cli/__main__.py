"""``python -m conformance.cli``: the ``conform`` command."""

import sys

from conformance.cli import main

sys.exit(main())
