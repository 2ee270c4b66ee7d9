"""Gateway replicas sharing sessions through Redis (``replicas.store``): docs/REPLICAS.md."""
