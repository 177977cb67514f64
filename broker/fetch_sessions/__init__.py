"""Fetch sessions (KIP-227): the leader's cache of what each fetcher fetches.

:mod:`broker.fetch_sessions.cache` holds the sessions and Kafka's bounds and eviction;
:mod:`broker.fetch_sessions.context` turns one Fetch request into what to read and
filters its response (full, incremental, sessionless, error);
:mod:`broker.fetch_sessions.topic_ids` resolves a v13+ Fetch's topic ids.
"""
