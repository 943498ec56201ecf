"""storage.io.objects against a real SeaweedFS: whole objects read with one GET each, the same
bytes pyarrow reads, and every case it cannot vouch for left to pyarrow (unknown properties, a
missing or refused object, a process forked after a request)."""

from __future__ import annotations

import os
import pickle
import select
import time
import uuid

import pyarrow.fs as pafs
import pytest

from storage.io import filesystem
from storage.io.objects import OneGetReads

KEYS = (
    "plain.avro",
    "with space.avro",
    "day=2024-01-01/x.avro",
    "a+b.avro",
    "per%41cent.avro",
    "été/ünïcode.avro",
    "empty.avro",
    "big.avro",
)


def _payload(name: str) -> bytes:
    if name == "empty.avro":
        return b""
    if name == "big.avro":
        return os.urandom(3 * 1024 * 1024 + 17)
    return f"{name}\x00\xff".encode() * 1000


def _put(s3_options, location: str, data: bytes) -> None:
    fs, path = filesystem(location, s3_options)
    with fs.open_output_stream(path) as out:
        out.write(data)


def _pyarrow_read(s3_options, location: str) -> bytes:
    fs, path = filesystem(location, s3_options)
    with fs.open_input_stream(path) as stream:
        return stream.read()


def test_whole_objects_are_read_in_one_request_with_the_bytes_pyarrow_reads(seaweedfs, s3_options, s3_prefix):
    reads = OneGetReads.for_properties(seaweedfs.s3_properties())
    assert reads is not None
    for name in KEYS:
        location = f"{s3_prefix}/{name}"
        data = _payload(name)
        _put(s3_options, location, data)
        before = seaweedfs.request_count("lake")
        got = reads.read(location)
        assert got is not None, name
        assert seaweedfs.request_count("lake") - before == 1, name
        assert bytes(got) == data == _pyarrow_read(s3_options, location), name


def test_the_fast_path_is_taken_only_where_it_reads_what_pyarrow_reads(seaweedfs):
    props = seaweedfs.s3_properties()
    assert OneGetReads.for_properties(props) is not None
    # with the same options, the same reader (its connections are kept between listings)
    assert OneGetReads.for_properties(dict(props)) is OneGetReads.for_properties(props)
    keys_and_region = {k: props[k] for k in ("s3.access-key-id", "s3.secret-access-key", "s3.region")}
    assert OneGetReads.for_properties(keys_and_region) is not None
    virtual = OneGetReads.for_properties({**props, "s3.force-virtual-addressing": "true"})
    assert virtual is not None and virtual.options.path_style is False
    refused = {
        "no properties (a credential chain)": {},
        "no secret": {k: v for k, v in props.items() if k != "s3.secret-access-key"},
        "neither endpoint nor region": {k: v for k, v in keys_and_region.items() if k != "s3.region"},
        "remote signing": {**props, "s3.remote-signing-enabled": "true"},
        "a proxy": {**props, "s3.proxy-uri": "http://proxy:3128"},
        "an assumed role": {**props, "client.role-arn": "arn:aws:iam::1:role/x"},
    }
    for why, properties in refused.items():
        assert OneGetReads.for_properties(properties) is None, why


def test_a_missing_or_refused_object_is_left_to_the_callers_own_read(
    seaweedfs, s3_options, s3_prefix, caplog
):
    location = f"{s3_prefix}/there.avro"
    _put(s3_options, location, b"x" * 100)
    reads = OneGetReads.for_properties(seaweedfs.s3_properties())
    assert reads.read(f"{s3_prefix}/not-there.avro") is None
    assert reads.read(location.replace("s3://", "gs://")) is None  # not S3: not this reader's
    wrong = OneGetReads.for_properties({**seaweedfs.s3_properties(), "s3.secret-access-key": "nope-nope"})
    with caplog.at_level("DEBUG", logger="storage.io.objects"):
        assert wrong.read(location) is None
    assert "nope-nope" not in caplog.text


def test_an_iceberg_listing_with_a_missing_manifest_names_it(
    seaweedfs, s3_options, s3_prefix, sql_catalog, tmp_path
):
    """The fast path's miss falls back to pyarrow's read, whose error the listing reports."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from storage.spec import load_table
    from storage.spec.errors import CorruptTable

    catalog = sql_catalog(f"onegets_{uuid.uuid4().hex[:6]}", s3_prefix, **seaweedfs.s3_properties())
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", Schema(NestedField(1, "id", LongType(), required=False)))
    for k in range(2):
        table.append(pa.table({"id": pa.array([k, k + 10], pa.int64())}))
    table = catalog.load_table("ns.t")
    spec_table = load_table(table.metadata_location, storage=s3_options)
    assert sorted(s.base_file.record_count for s in spec_table.file_index().list_files_at(None)) == [2, 2]
    manifest = table.current_snapshot().manifests(table.io)[0].manifest_path
    fs, path = filesystem(manifest, s3_options)
    fs.delete_file(path)
    with pytest.raises(CorruptTable, match="is missing"):
        list(load_table(table.metadata_location, storage=s3_options).file_index().list_files_at(None))


def test_a_process_forked_after_a_request_reads_through_pyarrow(seaweedfs, s3_options, s3_prefix):
    """object_store's runtime does not survive fork (a child's first request hangs): a child of a
    process that made a request must not use it, and must still read."""
    location = f"{s3_prefix}/forked.avro"
    _put(s3_options, location, b"forked" * 100)
    reads = OneGetReads.for_properties(seaweedfs.s3_properties())
    assert bytes(reads.read(location)) == b"forked" * 100  # the parent has made a request
    out, into = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            answer = (
                OneGetReads.for_properties(seaweedfs.s3_properties()) is None,
                reads.read(location) is None,
                _pyarrow_read(s3_options, location),
            )
        except BaseException as error:
            answer = repr(error)
        os.write(into, pickle.dumps(answer))
        os._exit(0)
    os.close(into)
    deadline = time.monotonic() + 120
    ready: list = []
    while not ready and time.monotonic() < deadline:
        ready, _, _ = select.select([out], [], [], 1)
    if not ready:
        os.kill(child, 9)
        os.waitpid(child, 0)
        pytest.fail("the forked child did not answer: its read hung")
    answer = pickle.loads(os.read(out, 1 << 20))
    os.close(out)
    os.waitpid(child, 0)
    assert answer == (True, True, b"forked" * 100)


def test_pyarrow_filesystems_are_untouched(s3_options, s3_prefix):
    """The FileIO's other uses are its own: ListingIO only adds the whole-file reads."""
    from storage.formats.iceberg._manifests import ListingIO

    class FileIO:
        properties = {"s3.endpoint": "http://x"}  # no keys: no fast path

        def new_input(self, path):
            return ("input", path)

    io = ListingIO(FileIO())
    assert io.one_get is None
    assert io.new_input("s3://lake/x") == ("input", "s3://lake/x")
    assert isinstance(filesystem(s3_prefix, s3_options)[0], pafs.S3FileSystem)


def test_an_unreachable_store_is_left_to_pyarrow_after_one_attempt():
    reads = OneGetReads.for_properties(
        {
            "s3.endpoint": "http://127.0.0.1:9",
            "s3.access-key-id": "k",
            "s3.secret-access-key": "s",
            "s3.connect-timeout": "1",
            "s3.request-timeout": "2",
        }
    )
    started = time.monotonic()
    assert reads.read("s3://lake/x.avro") is None
    # one attempt of a 1 s connect timeout (pyarrow's read then makes its own), slack for load
    assert time.monotonic() - started < 20
