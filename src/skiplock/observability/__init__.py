"""Observability: OpenTelemetry tracing (:mod:`skiplock.observability.tracing`), Prometheus
metrics of workers (:mod:`skiplock.observability.metrics`, served by ``skiplock worker
--metrics-port``) and their JSON logs (``--log-format json``).
"""
