"""``python -m sink`` is the ``runsink`` command, kept for v1 users.

The command itself lives in ``api/cli.py`` (serving needs the HTTP layer, and ``sink/``
never imports ``api/``): this shim only hands the process over to it by module name.
"""

import runpy

runpy.run_module("api", run_name="__main__", alter_sys=True)
