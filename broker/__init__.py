"""minikafka: broker package."""
