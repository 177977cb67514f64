"""broker.group."""
