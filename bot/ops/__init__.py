"""Running the bot as a service: Prometheus metrics, health and readiness, JSON logs with request ids."""
