"""clients.producer."""
