"""clients.consumer."""
