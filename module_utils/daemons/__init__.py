"""Long-running services the roles start (Redis, Prometheus, TensorBoard) and the GCS store (over base/)."""
