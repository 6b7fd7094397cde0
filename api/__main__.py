"""``python -m api`` is the ``runsink`` command."""

import sys

from api.cli import main

sys.exit(main())
