"""Security settings (imported at the end of console/settings.py)."""
