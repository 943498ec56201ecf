"""Start a server process in a session of its own and stop exactly that process group."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from pathlib import Path


def spawn(args: list[str], *, log: Path, env: dict[str, str] | None = None, cwd: Path | None = None):
    """A child in its own session (its own process group), stderr into ``log``, stdout piped."""
    return subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=log.open("ab"),
        env=env,
        cwd=cwd,
        start_new_session=True,
        text=True,
    )


def stop(child: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to the child's process group, SIGKILL if it is still there after ``grace`` seconds."""
    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGTERM)
            child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=grace)
        except ProcessLookupError:
            pass
    if child.stdout:
        child.stdout.close()


def read_line(child: subprocess.Popen, *, prefix: str, timeout: float, log: Path) -> str:
    """The first stdout line starting with ``prefix``; fails with the log when the child exits or
    ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            line = child.stdout.readline()
            if line.startswith(prefix):
                return line.strip()
            if line == "":  # end of file: the child exited
                break
    raise RuntimeError(f"{child.args[0]} did not start (exit {child.poll()}):\n{log.read_text()[-3000:]}")
