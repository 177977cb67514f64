"""STAND-IN (txpart): replaced by txstore's storage.index package when it lands."""
