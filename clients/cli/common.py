"""What the ``minikafka`` command modules share: the user-facing error and the default address.

:class:`CliError` is raised by any command (``main``, ``groups``, ``workload``, ...) for
a failure the user caused or can fix; :func:`clients.cli.main.main` prints it as one
line ``error: ...`` and exits with status 1.  ``DEFAULT_BOOTSTRAP`` is the broker
address client commands use without ``--bootstrap-server`` (Kafka's default port).

This module imports nothing from the project, so every command module may import it
(``main`` imports the command modules; they never import ``main``).
"""

from __future__ import annotations

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class CliError(ValueError):
    """A user-facing failure: printed as one line, exit status 1."""
