"""``python -m clients.cli``: the ``minikafka`` command line."""

import sys

from clients.cli.main import main

sys.exit(main())
