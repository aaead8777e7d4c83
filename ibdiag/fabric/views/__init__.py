"""Views of a judged fabric: JSON data, table, CSV rows, Prometheus metrics (one module each)."""
