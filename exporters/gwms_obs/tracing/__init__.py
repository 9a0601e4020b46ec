"""Pilot tracing: conventions, factory-side spans, the spool forwarder, Jaeger queries (docs/tracing.md)."""
