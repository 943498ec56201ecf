"""Prometheus metrics at ``/metrics``: who may scrape (``access``), what the database rows say at
scrape time (``rows``: tables, processes, backlog, cache), what the broker says (``runtime``: queue
depths, worker and beat liveness), request latency from every web process (``http``), and the
response that puts them together (``views``).

Gauges come from what is kept on the rows (a refresh keeps a table's facts there), so a scrape never
reads table metadata: a handful of aggregate queries whatever the number of tables.
"""
