"""minikafka: timer package."""
