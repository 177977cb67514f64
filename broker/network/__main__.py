"""``python -m broker.network``: one network process, started by its supervisor.

A broken pipe to the supervisor (it died) ends the process with status 1, not a traceback.
"""

import errno
import sys

from broker.network.entry import main

try:
    sys.exit(main())
except OSError as exc:
    if exc.errno != errno.EPIPE:
        raise
    sys.exit(1)
