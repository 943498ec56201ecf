"""storage.io.objects against a real SeaweedFS: whole objects read with one GET each, the same
bytes pyarrow reads, and every case it cannot vouch for left to pyarrow (unknown properties, a
missing or refused object, a process forked after a request)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import select
import time
import uuid

import pytest

from storage.io import filesystem
from storage.io.objects import OneGetReads

PLAIN_KEYS = (
    "plain.avro",
    "with space.avro",
    "day=2024-01-01/x.avro",
    "a+b_c-d.avro",
    "été/ünïcode.avro",
    "empty.avro",
    "big.avro",
)
# keys whose request object_store might spell otherwise than pyarrow: left to pyarrow
ODD_LOCATIONS = (
    "per%41cent.avro",
    "a//b.avro",
    "trailing/",
    "tilde~.avro",
    "q.avro?versionId=1",
    "f.avro#x",
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


def _file_io(seaweedfs):
    """pyiceberg's own pyarrow FileIO: the reads the fast path must match."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO(seaweedfs.s3_properties())


def test_whole_objects_are_read_in_one_request_with_the_bytes_pyicebergs_fileio_reads(seaweedfs, s3_prefix):
    reads = OneGetReads.for_properties(seaweedfs.s3_properties())
    assert reads is not None
    io = _file_io(seaweedfs)
    for name in PLAIN_KEYS:
        location = f"{s3_prefix}/{name}"
        data = _payload(name)
        with io.new_output(location).create(overwrite=True) as out:
            out.write(data)
        before = seaweedfs.request_count("lake")
        got = reads.read(location)
        assert got is not None, name
        assert seaweedfs.request_count("lake", at_least=before + 1) - before == 1, name
        with io.new_input(location).open() as stream:
            assert bytes(got) == data == stream.read(), name
    before = seaweedfs.request_count("lake")
    for name in ODD_LOCATIONS:
        assert reads.read(f"{s3_prefix}/{name}") is None, name
    assert reads.read("s3://Not_A_Bucket/x.avro") is None
    # not even asked: one more plain read is the only request counted since
    assert reads.read(f"{s3_prefix}/{PLAIN_KEYS[0]}") is not None
    assert seaweedfs.request_count("lake", at_least=before + 1) == before + 1


def test_the_fast_path_is_taken_only_where_it_reads_what_pyarrow_reads(seaweedfs):
    props = seaweedfs.s3_properties()
    environ = {"AWS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt", "PATH": "/usr/bin"}
    assert OneGetReads.for_properties(props, environ) is not None
    # with the same options, the same reader (its connections are kept between listings)
    assert OneGetReads.for_properties(dict(props), environ) is OneGetReads.for_properties(props, environ)
    keys_and_region = {k: props[k] for k in ("s3.access-key-id", "s3.secret-access-key", "s3.region")}
    assert OneGetReads.for_properties(keys_and_region, {}) is not None
    assert OneGetReads.for_properties(props, {"AWS_ENDPOINT_URL": "http://elsewhere:1"}) is not None
    assert OneGetReads.for_properties(props, {}).options.path_style is True
    # pyiceberg ignores s3.path-style-access (pyarrow stays path-style): so does the fast path
    assert (
        OneGetReads.for_properties({**props, "s3.path-style-access": "false"}, {}).options.path_style is True
    )
    for spelling in ("true", "t", "Yes", "1"):
        virtual = OneGetReads.for_properties({**props, "s3.force-virtual-addressing": spelling}, {})
        assert virtual is not None and virtual.options.path_style is False, spelling
    refused = {
        "no properties (a credential chain)": ({}, {}),
        "no secret": ({k: v for k, v in props.items() if k != "s3.secret-access-key"}, {}),
        "no region (pyiceberg would look it up)": ({k: v for k, v in props.items() if k != "s3.region"}, {}),
        "remote signing": ({**props, "s3.remote-signing-enabled": "true"}, {}),
        "a proxy": ({**props, "s3.proxy-uri": "http://proxy:3128"}, {}),
        "an assumed role": ({**props, "client.role-arn": "arn:aws:iam::1:role/x"}, {}),
        "an unreadable switch": ({**props, "s3.force-virtual-addressing": "maybe"}, {}),
        "a session token only object_store would add": (props, {"AWS_SESSION_TOKEN": "tok"}),
        "an endpoint only object_store would read": (keys_and_region, {"AWS_ENDPOINT": "http://elsewhere:1"}),
        "a proxy in the environment": (props, {"https_proxy": "http://proxy:3128"}),
        "requests signed otherwise": (props, {"AWS_SKIP_SIGNATURE": "true"}),
    }
    for why, (properties, env) in refused.items():
        assert OneGetReads.for_properties(properties, env) is None, why


def test_only_pyicebergs_pyarrow_fileio_takes_the_fast_path(seaweedfs):
    from pyiceberg.io.fsspec import FsspecFileIO

    from storage.formats.iceberg._manifests import ListingIO

    assert ListingIO(_file_io(seaweedfs)).one_get is not None
    fsspec_io = ListingIO(FsspecFileIO(seaweedfs.s3_properties()))
    assert fsspec_io.one_get is None
    assert fsspec_io.properties == seaweedfs.s3_properties()  # everything else is the FileIO's


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


def test_an_unreachable_store_is_left_to_pyarrow_after_one_attempt():
    reads = OneGetReads.for_properties(
        {
            "s3.endpoint": "http://127.0.0.1:9",
            "s3.access-key-id": "k",
            "s3.secret-access-key": "s",
            "s3.region": "us-east-1",
            "s3.connect-timeout": "1",
            "s3.request-timeout": "2",
        }
    )
    started = time.monotonic()
    assert reads.read("s3://lake/x.avro") is None
    # one attempt of a 1 s connect timeout (pyarrow's read then makes its own), slack for load
    assert time.monotonic() - started < 20


def test_a_listing_gives_the_same_slices_with_and_without_the_fast_path(
    seaweedfs, s3_options, s3_prefix, sql_catalog, monkeypatch
):
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    from storage.spec import load_table

    catalog = sql_catalog(f"onegets_{uuid.uuid4().hex[:6]}", s3_prefix, **seaweedfs.s3_properties())
    catalog.create_namespace("ns")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
    table = catalog.create_table("ns.t", schema, partition_spec=spec)
    for k in range(3):
        table.append(
            pa.table(
                {"id": pa.array([k, k + 10, k + 20], pa.int64()), "region": pa.array(["eu", "us", f"r{k}"])}
            )
        )
    table = catalog.load_table("ns.t")
    manifests = len(table.current_snapshot().manifests(table.io))

    def listing(expected: int) -> tuple[list, int]:
        spec_table = load_table(table.metadata_location, storage=s3_options)
        spec_table.timeline()
        loaded = seaweedfs.request_count("lake")
        slices = list(spec_table.file_index().list_files_at(None, "id >= 10"))
        # the count compared below, waited for: a counter bumped late is not read short
        return slices, seaweedfs.request_count("lake", at_least=loaded + expected) - loaded

    fast, fast_requests = listing(manifests + 1)
    monkeypatch.setattr(OneGetReads, "for_properties", classmethod(lambda cls, *a, **k: None))
    slow, slow_requests = listing(2 * (manifests + 1))
    assert fast_requests == manifests + 1 and slow_requests == 2 * (manifests + 1)
    # the eu files (ids 0-2) are pruned by their bounds; the others hold ids >= 10
    assert sorted(s.base_file.record_count for s in fast) == [1] * 6
    assert sorted(s.base_file.partition["region"] for s in fast) == ["r0", "r1", "r2", "us", "us", "us"]
    assert fast == slow
    for a, b in zip(fast, slow, strict=True):
        assert a.partition == b.partition and dict(a.base_file.partition) == dict(b.base_file.partition)
        assert dict(a.base_file.lower_bounds) == dict(b.base_file.lower_bounds)
        assert dict(a.base_file.upper_bounds) == dict(b.base_file.upper_bounds)


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_opening_a_table_reads_its_metadata_file_in_one_request(
    seaweedfs, s3_options, s3_prefix, sql_catalog, monkeypatch, codec
):
    """The metadata file is read through the client the table's listings use (made there, once),
    in one GET, and parses to what pyiceberg's own read of it gives, gzipped or not."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from storage.formats.iceberg._metadata import read_document
    from storage.spec import load_table
    from storage.spec.errors import TableNotFound

    catalog = sql_catalog(f"onegets_{uuid.uuid4().hex[:6]}", s3_prefix, **seaweedfs.s3_properties())
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", Schema(NestedField(1, "id", LongType(), required=False)))
    for k in range(2):
        table.append(pa.table({"id": pa.array([k, k + 10], pa.int64())}))
    location = catalog.load_table("ns.t").metadata_location
    plain = _pyarrow_read(s3_options, location)
    if codec == "gzip":  # what a writer with write.metadata.compression-codec=gzip leaves
        location = location.replace("/00002-", "/00003-").replace(".metadata.json", ".gz.metadata.json")
        _put(s3_options, location, gzip.compress(plain))

    before = seaweedfs.request_count("lake")
    document = read_document(_file_io(seaweedfs), location)
    assert seaweedfs.request_count("lake", at_least=before + 1) == before + 1
    assert document == json.loads(plain)
    assert document["current-snapshot-id"] == table.current_snapshot().snapshot_id

    fast = load_table(location, storage=s3_options)
    monkeypatch.setattr(OneGetReads, "for_properties", classmethod(lambda cls, *a, **k: None))
    slow = load_table(location, storage=s3_options)
    assert fast.pyiceberg_table.metadata == slow.pyiceberg_table.metadata
    assert [i.id for i in fast.timeline().instants()] == [i.id for i in slow.timeline().instants()]
    assert len(fast.timeline().instants()) == 2
    monkeypatch.undo()
    with pytest.raises(TableNotFound):
        load_table(location.replace("/metadata/", "/metadata/gone-"), storage=s3_options)
