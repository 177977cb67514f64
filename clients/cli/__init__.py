"""clients.cli."""
