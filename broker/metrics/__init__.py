"""Prometheus metrics of a broker and of the controller (docs/metrics.md lists them all).

- :mod:`~broker.metrics.endpoint`: the opt-in HTTP port (``metrics_port``) on the
  process's event loop, bounded, rendering a registry with prometheus_client; its
  docstring says why it lives in the main process and on the loop;
- :mod:`~broker.metrics.request_metrics`: answered requests and their latency per API,
  rendered from :mod:`~broker.metrics.request_times` (a broker: the table its network
  processes record every request's phases in, in shared memory) or counted in the
  process (the controller);
- :mod:`~broker.metrics.topic_metrics`: bytes and records in and out per topic;
- :mod:`~broker.metrics.broker_collector`: the broker's families, read from its core on
  each scrape; :mod:`~broker.metrics.group_lag`: consumer-group lag;
- :mod:`~broker.metrics.controller_collector`: the controller's families;
- :mod:`~broker.metrics.scrape_login`: who may scrape a broker that requires logins.

Counting on the hot paths is plain int arithmetic in these objects, in the shared table
(request times), or in a counter beside the state it counts (ISR changes, repairs,
failed logins, elections); prometheus_client objects are built only when scraped.
"""
