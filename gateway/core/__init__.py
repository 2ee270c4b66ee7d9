"""The core every gateway room may use: settings, metrics, keys and limits, transport guards, stores, the
shared services. It imports nothing above it (tests/importgraph.py holds the rule)."""
