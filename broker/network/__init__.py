"""broker.network."""
