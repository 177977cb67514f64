"""clients.records."""
