"""``python -m broker.cluster``: the local cluster launcher's command line."""

import sys

from broker.cluster.launcher import main

sys.exit(main())
