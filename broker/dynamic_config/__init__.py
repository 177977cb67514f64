"""Broker configs that change while the broker runs (Kafka's dynamic broker configs):
``broker_configs`` (the names that may change, their checks, and one broker's overrides,
kept in its data directory).  Nothing is exported here: import from the defining module.
"""
