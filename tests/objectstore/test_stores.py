"""storage.io.stores against a real SeaweedFS: options from properties and environment, masking,
normalised keys, confinement, and the pyarrow file system with signed requests and timeouts."""

from __future__ import annotations

import time

import pyarrow.fs as pafs
import pytest

from storage.io import PathNotAllowed, StoreOptions, filesystem, is_within, normalise


def test_properties_override_environment_and_secrets_are_masked():
    environ = {
        "AWS_ACCESS_KEY_ID": "aws-key",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "LAKEWARDEN_S3_ENDPOINT": "http://store:9000",
        "AWS_ENDPOINT_URL": "http://ignored:1",
        "AWS_REGION": "eu-west-1",
    }
    options = StoreOptions.from_properties({"s3.secret-access-key": "catalog-secret"}, environ=environ)
    assert options.access_key == "aws-key"
    assert options.secret_key == "catalog-secret"
    assert options.endpoint == "http://store:9000"
    assert options.region == "eu-west-1"
    shown = repr(options) + str(options.masked())
    assert "catalog-secret" not in shown and "aws-secret" not in shown
    assert "aws-key" in shown
    assert StoreOptions.from_json(options.to_json()) == options
    assert options.properties()["s3.secret-access-key"] == "catalog-secret"
    assert options.delta_options()["AWS_ALLOW_HTTP"] == "true"


@pytest.mark.parametrize(
    "endpoint, url",
    [("store.example:9000", "https://store.example:9000"), ("http://store:9000", "http://store:9000")],
)
def test_every_client_reads_the_endpoint_as_pyarrow_does(endpoint, url):
    """An endpoint written without a scheme is https for pyarrow, and so for deltalake, hudi-rs
    and object_store (one set of settings, ``object_store_config``, spelled for each)."""
    options = StoreOptions(endpoint=endpoint, access_key="k", secret_key="s", region="eu-west-1")
    pyarrow_kwargs = options.s3_filesystem().__reduce__()[1][0]  # how the file system was made
    assert f"{pyarrow_kwargs['scheme']}://{pyarrow_kwargs['endpoint_override']}" == url
    plain_http = url.startswith("http://")
    config = options.object_store_config()
    assert config["endpoint"] == options.delta_options()["AWS_ENDPOINT_URL"] == url
    assert options.hudi_options()["aws_endpoint_url"] == url
    assert ("allow_http" in config) == ("AWS_ALLOW_HTTP" in options.delta_options()) == plain_http
    assert (
        config["virtual_hosted_style_request"] == options.delta_options()["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"]
    )
    assert {config["access_key_id"], config["secret_access_key"], config["region"]} == {"k", "s", "eu-west-1"}
    assert options.delta_options()["AWS_EC2_METADATA_DISABLED"] == "true"
    assert StoreOptions().delta_options()["AWS_REGION"] == "us-east-1"  # deltalake's default region


def test_bad_timeout_is_named():
    with pytest.raises(ValueError, match="request-timeout"):
        StoreOptions.from_properties({"s3.request-timeout": "soon"}, environ={})


@pytest.mark.parametrize(
    "location",
    [
        "s3://lake/a/../b",
        "s3://lake/a/./b",
        "s3://lake/a//b",
        "s3://lake/a%2F..%2Fb",
        "s3://lake/a/%2e%2e/b",
        "s3://lake/a\\..\\b",
        "s3://lake/a?versionId=1",
        "s3://lake/a\x00b",
        "s3:///nobucket",
        "ftp://lake/a",
    ],
)
def test_tricky_keys_are_refused(location):
    with pytest.raises(PathNotAllowed):
        normalise(location)


def test_normalise_and_confine():
    assert normalise("s3a://lake/prod/orders/") == "s3://lake/prod/orders"
    assert is_within("s3://lake/prod/orders", "s3://lake/prod/")
    assert is_within("s3://lake/prod", "s3://lake/prod/")
    assert not is_within("s3://lake/production/orders", "s3://lake/prod/")
    assert not is_within("s3://other/prod/orders", "s3://lake/prod/")
    assert not is_within("/lake/prod/orders", "s3://lake/prod/")
    with pytest.raises(PathNotAllowed):
        is_within("s3://lake/prod/../secret", "s3://lake/prod/")


def test_round_trip_on_the_object_store(s3_options, s3_prefix):
    fs, path = filesystem(f"{s3_prefix}/x/data.bin", s3_options)
    assert isinstance(fs, pafs.S3FileSystem)
    assert path == f"{s3_prefix.removeprefix('s3://')}/x/data.bin"
    with fs.open_output_stream(path) as out:
        out.write(b"\x00lakewarden\xff" * 1000)
    # Signed uploads are stored as sent (unsigned streaming ones kept their chunk framing).
    with fs.open_input_file(path) as handle:
        assert handle.read() == b"\x00lakewarden\xff" * 1000
    listed = fs.get_file_info(pafs.FileSelector(path.rsplit("/", 2)[0], recursive=True))
    assert [info.path for info in listed if info.type == pafs.FileType.File] == [path]


def test_wrong_secret_is_refused_quickly(seaweedfs, s3_prefix):
    wrong = StoreOptions.from_properties(
        {**seaweedfs.s3_properties(), "s3.secret-access-key": "nope"}, environ={}
    )
    fs, path = filesystem(s3_prefix, wrong)
    with pytest.raises(OSError) as raised:
        fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    assert "nope" not in str(raised.value)


def test_unreachable_endpoint_fails_within_the_timeouts():
    options = StoreOptions.from_properties(
        {
            "s3.endpoint": "http://127.0.0.1:9",
            "s3.access-key-id": "k",
            "s3.secret-access-key": "s",
            "s3.connect-timeout": "1",
            "s3.request-timeout": "2",
        },
        environ={},
    )
    fs, path = filesystem("s3://lake/x", options)
    started = time.monotonic()
    with pytest.raises(OSError):
        fs.get_file_info(path)
    # Three attempts of a 1 s connect timeout (the bound the product promises), with slack for load.
    assert time.monotonic() - started < 30
