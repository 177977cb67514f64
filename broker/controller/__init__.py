"""broker.controller."""
