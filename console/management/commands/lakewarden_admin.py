from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the admin user (LAKEWARDEN_ADMIN_USER / LAKEWARDEN_ADMIN_PASSWORD) if it does not exist."

    def handle(self, *args, **options):
        username = os.environ.get("LAKEWARDEN_ADMIN_USER") or "admin"
        password = os.environ.get("LAKEWARDEN_ADMIN_PASSWORD")
        password_file = Path(settings.LAKEWARDEN_VAR_DIR) / "admin-password"
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is not None:
            if password:
                user.set_password(password)
                user.save()
                self.stdout.write(f"admin user {username!r}: password set from LAKEWARDEN_ADMIN_PASSWORD")
            else:
                hint = f" (generated password in {password_file})" if password_file.exists() else ""
                self.stdout.write(f"admin user {username!r} exists; password unchanged{hint}")
            return
        generated = password is None
        password = password or secrets.token_urlsafe(12)
        user = user_model.objects.create_superuser(username=username, email="", password=password)
        user.groups.add(Group.objects.get(name="admin"))
        if generated:
            password_file.parent.mkdir(parents=True, exist_ok=True)
            password_file.write_text(password + "\n")
            password_file.chmod(0o600)
            self.stdout.write(
                self.style.SUCCESS(f"created admin user {username!r} with password: {password}")
            )
            self.stdout.write(f"(also saved in {password_file})")
        else:
            self.stdout.write(
                self.style.SUCCESS(f"created admin user {username!r} with LAKEWARDEN_ADMIN_PASSWORD")
            )
