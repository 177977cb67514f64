"""The consumer's side of KIP-848's consumer group protocol (ConsumerGroupHeartbeat):
the member's state machine (:mod:`.member`) and assignment reconciliation
(:mod:`.reconciliation`).  Pure: no I/O, an injected clock; the consumer drives them."""
