"""clients.memory."""
