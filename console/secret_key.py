"""The installation's secret key when ``SECRET_KEY`` is unset: one key in ``<var dir>/secret_key``
for every process (each gunicorn worker, the Celery workers, manage.py), made once and kept.

``console/settings.py`` takes ``secret_key_on_first_use(path)``: a lazy string that reads (or
makes) the file the first time Django signs something, so importing the settings creates nothing.
``scripts/setup.sh`` and ``manage.py lakewarden_serve`` make the file before any worker starts.
Imports neither ``console.settings`` nor Django's configured settings.
"""

from __future__ import annotations

import errno
import functools
import os
import secrets
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import Promise, lazy


def secret_key_on_first_use(path: Path) -> Promise:
    """The key kept in ``path`` as a lazy ``str``: Django's signing (``force_bytes``, ``salted_hmac``)
    reads it the first time it needs it; the file is read (or made) then, once per process."""
    return lazy(_kept_key, str)(Path(path))


@functools.cache
def _kept_key(path: Path) -> str:
    return persistent_secret_key(path)


def persistent_secret_key(path: Path, *, wait_seconds: float = 10.0) -> str:
    """The secret key kept in ``path``, made on first use: one key for every process of the
    installation (each gunicorn worker, Celery, manage.py), surviving restarts.

    The file is written once, mode 0600, atomically and race-free when several processes start at
    once: each writes a complete key to a private temporary file and links it to ``path``
    (``link`` fails when ``path`` exists, like ``O_CREAT|O_EXCL``, but the name only ever appears
    with the whole key in it); whoever loses the race reads the winner's key. On a filesystem
    without hard links the file is created with ``O_CREAT|O_EXCL`` and readers wait for its
    content.
    """
    path = Path(path)
    key = _read_key(path)
    if key:
        return key
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _create_key_file(path, secrets.token_urlsafe(50))
    except OSError as error:
        raise ImproperlyConfigured(
            f"cannot create the secret key file {path}: {error} (set SECRET_KEY or LAKEWARDEN_VAR_DIR)"
        ) from None
    deadline = time.monotonic() + wait_seconds
    while True:  # the winner's key, ours or another process's
        key = _read_key(path)
        if key:
            return key
        if time.monotonic() > deadline:
            raise ImproperlyConfigured(f"{path} is empty: delete it or set SECRET_KEY")
        time.sleep(0.05)


def _read_key(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ImproperlyConfigured(f"cannot read the secret key file {path}: {error}") from None


def _create_key_file(path: Path, key: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(key + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # another process won: its key is the one
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            _create_key_file_exclusively(path, key)
    finally:
        temporary.unlink(missing_ok=True)


def _create_key_file_exclusively(path: Path, key: str) -> None:
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key + "\n")
        handle.flush()
        os.fsync(handle.fileno())
