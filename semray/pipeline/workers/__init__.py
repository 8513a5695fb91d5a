"""The code execution runs per batch: inside Ray tasks and actors (semantic, embedding and code
batches, per-batch SQL, top-k, aggregation, blocking, search), and on the driver in a LIMIT's round
trips; it may hold Ray handles (``TierHandles``) but never imports ``ray.data``."""
