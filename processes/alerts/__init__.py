"""Alerts (issue 16): notification channels, rules, episodes (one alert per episode, a resolve when it
clears) and deliveries (recorded, retried with backoff on the light queue). Rules that need the
console's view of the service (liveness, health ranking) are evaluated in console/alerts.py."""
