"""Dashboards, rules and alert routing for gwms-obs, generated from the metric catalogue.

Run ``make dashboards`` (``python -m dashboards.gen``) from the repository root;
tests/test_dashboards.py fails when a committed file differs from what this
package renders. This is a build-time tool: factory hosts receive the JSON and
YAML it writes, never this code (grafana-foundation-sdk needs Python >= 3.11).
"""
