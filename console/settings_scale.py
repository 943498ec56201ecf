"""Celery routing for scale-out (star-imported at the end of console/settings.py)."""
