"""The Spark verification job: a topic checked against the workload's ledger.

``job`` (``minikafka verify``: lost, duplicated, reordered, phantom and the transactional
findings, the report), ``session`` (the Spark session and Java checks),
``transactions`` (read_committed checks: aborted reads, torn and lost transactions).
See docs/verification.md.  Nothing is exported here: import from the module.
"""
