"""broker.cluster."""
