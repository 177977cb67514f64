"""minikafka: replication package."""
