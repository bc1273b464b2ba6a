"""The KV-cache and all-gather memory estimator."""
