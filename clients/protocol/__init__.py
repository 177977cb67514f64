"""clients.protocol."""
