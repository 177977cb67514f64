"""storage.cleaner."""
