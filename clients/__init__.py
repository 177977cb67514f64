"""minikafka: clients package."""
