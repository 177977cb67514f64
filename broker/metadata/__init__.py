"""broker.metadata."""
