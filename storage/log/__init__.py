"""storage.log."""
