"""broker.handlers."""
