"""``python -m sink`` is the ``runsink`` command."""

import sys

from sink.cli import main

sys.exit(main())
