"""Alerts (issue 16): notification channels, rules, episodes (one alert per episode, a resolve when it
clears) and deliveries (recorded, retried with backoff on the light queue). models.py holds them,
evaluation.py evaluates the rules (reading processes/health.py's health ranking and liveness),
delivery.py sends to a channel, services.py is what the console and API call, and tasks.py has the
Celery tasks: the beat tick ``evaluate_alerts_task`` and ``deliver_alert_task``."""
