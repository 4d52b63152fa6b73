"""Observability: OpenTelemetry tracing (:mod:`skiplock.observability.tracing`), Prometheus
metrics and JSON logs of workers (behind ``skiplock worker --metrics-port`` / ``--log-format``).
"""
