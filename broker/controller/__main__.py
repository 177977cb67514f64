"""``python -m broker.controller``: run one controller process."""

import sys

from broker.controller.server import main

sys.exit(main())
