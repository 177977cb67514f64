"""minikafka: storage package."""
