"""clients.protocol.messages."""
