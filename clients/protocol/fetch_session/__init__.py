"""The fetcher's side of fetch sessions (KIP-227): :mod:`.handler`."""
