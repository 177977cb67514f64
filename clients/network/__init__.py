"""clients.network."""
