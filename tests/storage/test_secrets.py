"""The one secrets module: which keys are secret, how values, mappings, URLs and text are masked,
and how a re-submitted form keeps the stored secrets. Plain functions, no database."""

from __future__ import annotations

import pytest

from storage.secrets import MASK, is_secret_key, mask_mapping, mask_text, mask_url, mask_value, merge_secrets

SECRET_KEYS = [
    # pyiceberg: catalogs and FileIO
    "token",
    "credential",
    "s3.secret-access-key",
    "s3.session-token",
    "client.secret-access-key",
    "client.session-token",
    "glue.secret-access-key",
    "glue.session-token",
    "adls.account-key",
    "adls.sas-token",
    "adls.sas-token.myaccount.dfs.core.windows.net",
    "adls.connection-string",
    "adls.client-secret",
    "adls.token",
    "adls.credential",
    "gcs.oauth2.token",
    "gcs.service.account.key",
    "hf.token",
    "header.Authorization",
    "header.X-Api-Key",
    "header.X-Auth-Token",
    "header.Cookie",
    "auth.basic.password",
    "auth.oauth2.client_secret",
    "s3.sse-customer-key",
    # deltalake / object_store storage options
    "aws_secret_access_key",
    "AWS_SECRET_ACCESS_KEY",
    "aws_session_token",
    "aws_token",
    "secret_access_key",
    "session_token",
    "azure_storage_account_key",
    "azure_storage_access_key",
    "access_key",
    "azure_storage_master_key",
    "azure_storage_sas_key",
    "azure_storage_sas_token",
    "sas_token",
    "azure_client_secret",
    "client_secret",
    "azure_storage_token",
    "bearer_token",
    "google_service_account_key",
    "service_account_key",
    # Hudi, Hadoop, Kerberos
    "hoodie.datasource.hive_sync.password",
    "hoodie.aws.secret.key",
    "hoodie.aws.session.token",
    "hoodie.aws.access.key",  # ambiguous "access key" without "id": masked
    "fs.s3a.secret.key",
    "hive.kerberos-keytab",
    "keytab",
    # name patterns
    "password",
    "db_password",
    "PGPASSWORD",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "SECRET_KEY",
    "clientSecret",
    "api_key",
    "apiKey",
    "apikey",
    "X-API-KEY",
    "private_key",
    "private-key",
    "privateKey",
    "access-key-secret",
    "encryption_key",
    "dsn",
    "sentry_dsn",
    "basic_auth",
    "auth",
    "storage_password",
    "tokens",
    "vault.secret-id",
]

NOT_SECRET_KEYS = [
    "uri",
    "warehouse",
    "type",
    "root",
    "schema",
    "s3.endpoint",
    "s3.region",
    "s3.access-key-id",  # an identifier, shown (like a user name)
    "client.access-key-id",
    "glue.access-key-id",
    "aws_access_key_id",
    "AWS_ACCESS_KEY_ID",
    "accessKeyId",
    "s3.sse-kms-key-id",
    "private_key_id",
    "s3.signer.uri",
    "adls.account-name",
    "adls.client-id",
    "adls.tenant-id",
    "gcs.project-id",
    "gcs.oauth2.token-expires-at",
    "oauth2-server-uri",
    "token-endpoint",
    "token_url",
    "token-refresh-enabled",
    "credentials-provider",
    "password-file",
    "azure_federated_token_file",
    "google_service_account",
    "rest.signing-name",
    "rest.signing-region",
    "rest.sigv4-enabled",
    "header.X-Iceberg-Access-Delegation",
    "hive.kerberos-authentication",
    "hive.kerberos-service-name",
    "auth.type",
    "auth.manager",
    "hoodie.table.name",
    "hoodie.datasource.write.recordkey.field",
    "hoodie.datasource.hive_sync.username",
    "azure_storage_account_name",
    "azure_client_id",
    "client_id",
    "user",
    "username",
    "TokenError",
    "PasswordResetWarning",
    "py-io-impl",
    "",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", NOT_SECRET_KEYS)
def test_keys_that_are_not_secret(key):
    assert not is_secret_key(key)


def test_a_plugin_can_declare_more_secret_keys():
    assert not is_secret_key("note")
    assert is_secret_key("note", secret_keys={"note"})
    assert is_secret_key("NOTE", secret_keys=["note"])


# --- URLs and DSNs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        (
            "postgresql://cache:hunter2@db.internal:5433/results",
            f"postgresql://cache:{MASK}@db.internal:5433/results",
        ),
        ("postgresql+psycopg2://cat:hunter2@h/catalog", f"postgresql+psycopg2://cat:{MASK}@h/catalog"),
        ("postgresql://u:p%40ss@h/db", f"postgresql://u:{MASK}@h/db"),
        ("postgresql://u:p@ss@h/db", f"postgresql://u:{MASK}@h/db"),
        ("redis://:redis-pass@127.0.0.1:6379/0", f"redis://:{MASK}@127.0.0.1:6379/0"),
        ("s3://k:hunter2@bucket/x", f"s3://k:{MASK}@bucket/x"),
        (
            "host=db user=cache password=hunter2 dbname=results",
            f"host=db user=cache password={MASK} dbname=results",
        ),
        ("host=db password='se cret' dbname=r", f"host=db password={MASK} dbname=r"),
        ("password=hunter2 nonsense", f"password={MASK} nonsense"),
        (
            "postgresql://h/db?password=x&sslmode=require",
            f"postgresql://h/db?password={MASK}&sslmode=require",
        ),
        ("https://h/c?sv=2020&sig=abc%2B&se=1", f"https://h/c?sv=2020&sig={MASK}&se=1"),
        ("https://h/x?token=abc&page=2", f"https://h/x?token={MASK}&page=2"),
        ("Server=x;Uid=u;Pwd=secret;Database=d", f"Server=x;Uid=u;Pwd={MASK};Database=d"),
        ("see postgresql://lake:pw@db/lake for details", f"see postgresql://lake:{MASK}@db/lake for details"),
        # unchanged: nothing secret in them
        ("http://rest:8181", "http://rest:8181"),
        ("https://key123@sentry.example.com/4", "https://key123@sentry.example.com/4"),
        ("file:///lake/warehouse", "file:///lake/warehouse"),
        ("https://h/x?page=2&size=10", "https://h/x?page=2&size=10"),
        ("/cache", "/cache"),
        ("", ""),
    ],
)
def test_mask_url(url, masked):
    assert mask_url(url) == masked


# --- values and mappings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "masked"),
    [
        ("token", "tok-abc-123", MASK),
        ("token", "", ""),
        ("token", None, None),
        ("credential", "client:s3cr3t", MASK),
        ("s3.secret-access-key", "hunter3", MASK),
        ("port_password", 1234, MASK),
        ("auth", True, MASK),
        ("dsn", "postgresql://cache:hunter2@db/results", f"postgresql://cache:{MASK}@db/results"),
        ("dsn", "host=db password=hunter2", f"host=db password={MASK}"),
        ("dsn", "https://key123@sentry.example.com/4", MASK),
        ("uri", "postgresql+psycopg2://cat:hunter2@h/catalog", f"postgresql+psycopg2://cat:{MASK}@h/catalog"),
        ("uri", "http://rest:8181", "http://rest:8181"),
        ("warehouse", "file:///lake", "file:///lake"),
        ("s3.access-key-id", "AKIAEXAMPLE", "AKIAEXAMPLE"),
        ("note", "s3://k:hunter2@bucket/x", f"s3://k:{MASK}@bucket/x"),
        ("pool_size", 5, 5),
        ("enabled", False, False),
        (
            "headers",
            {"Authorization": "Bearer x", "Accept": "json"},
            {"Authorization": MASK, "Accept": "json"},
        ),
        ("credentials", {"client_id": "me", "value": "abc"}, {"client_id": MASK, "value": MASK}),
        ("uris", ["postgresql://a:b@h/d", "http://x"], [f"postgresql://a:{MASK}@h/d", "http://x"]),
        ("tokens", ["a", "b"], [MASK, MASK]),
    ],
)
def test_mask_value(key, value, masked):
    assert mask_value(key, value) == masked


def test_mask_mapping_masks_secrets_and_keeps_where_things_point():
    config = {
        "uri": "postgresql+psycopg2://cat:hunter2@h/catalog",
        "warehouse": "file:///lake",
        "s3.secret-access-key": "hunter3",
        "s3.access-key-id": "AKIAEXAMPLE",
        "s3.endpoint": "http://minio:9000",
        "token": "tok",
    }
    masked = mask_mapping(config)
    assert masked == {
        "uri": f"postgresql+psycopg2://cat:{MASK}@h/catalog",
        "warehouse": "file:///lake",
        "s3.secret-access-key": MASK,
        "s3.access-key-id": "AKIAEXAMPLE",
        "s3.endpoint": "http://minio:9000",
        "token": MASK,
    }
    assert "hunter" not in repr(masked) and "tok'" not in repr(masked)
    assert config["token"] == "tok"  # a copy; the original is untouched


def test_mask_mapping_recurses_into_nested_configuration():
    properties = {
        "auth": {"type": "basic", "basic": {"username": "u", "password": "p4ss"}},
        "catalogs": [{"name": "a", "uri": "postgresql://x:pw1@h/c"}, {"name": "b", "token": "t0k"}],
        "adls": {"account-key": "k3y", "account-name": "acct"},
    }
    masked = mask_mapping(properties)
    assert masked["auth"] == {
        "type": MASK,
        "basic": {"username": MASK, "password": MASK},
    }  # under "auth": all
    assert masked["catalogs"] == [
        {"name": "a", "uri": f"postgresql://x:{MASK}@h/c"},
        {"name": "b", "token": MASK},
    ]
    assert masked["adls"] == {"account-key": MASK, "account-name": "acct"}
    for secret in ("p4ss", "pw1", "t0k", "k3y"):
        assert secret not in repr(masked)


def test_mask_mapping_of_nothing():
    assert mask_mapping(None) == {}
    assert mask_mapping({}) == {}


# The storage registry's mask_config(type_cls, config) is mask_mapping(config, secret_keys=type_cls.secret_keys).
POSTGRES_SECRET_KEYS = frozenset({"dsn"})


def test_registry_behaviour_a_dsn_keeps_everything_but_its_password():
    masked = mask_mapping(
        {"dsn": "postgresql://cache:hunter2@db.internal:5433/results", "schema": "c"},
        secret_keys=POSTGRES_SECRET_KEYS,
    )
    assert masked == {"dsn": f"postgresql://cache:{MASK}@db.internal:5433/results", "schema": "c"}


def test_registry_behaviour_a_keyword_dsn_password_is_masked():
    masked = mask_mapping({"dsn": "host=db user=cache password=hunter2 dbname=results"}, secret_keys={"dsn"})
    assert "hunter2" not in masked["dsn"]
    assert "host=db" in masked["dsn"]


def test_registry_behaviour_a_password_in_a_url_under_a_non_secret_key_is_masked_too():
    masked = mask_mapping({"root": "/cache", "note": "s3://k:hunter2@bucket/x"})
    assert masked == {"root": "/cache", "note": f"s3://k:{MASK}@bucket/x"}


def test_serializer_behaviour_catalog_token_is_masked():
    masked = mask_mapping({"uri": "http://x", "token": "s3cr3t"})
    assert masked == {"uri": "http://x", "token": MASK}


# --- write-only form fields ------------------------------------------------------------------------------


def test_resubmitting_a_masked_form_keeps_the_stored_secrets():
    stored = {"dsn": "postgresql://cache:hunter2@db/results", "schema": "c"}
    shown = mask_mapping(stored, secret_keys={"dsn"})
    assert merge_secrets(stored, {**shown, "schema": "d"}, secret_keys={"dsn"}) == {
        "dsn": "postgresql://cache:hunter2@db/results",
        "schema": "d",
    }
    changed = {"dsn": "postgresql://cache:new@db/results", "schema": "c"}
    assert merge_secrets(stored, changed, secret_keys={"dsn"}) == changed


@pytest.mark.parametrize("submitted", [MASK, "", None])
def test_a_secret_sent_blank_or_masked_keeps_the_old_value(submitted):
    old = {"token": "tok-1", "uri": "http://rest"}
    assert merge_secrets(old, {"token": submitted, "uri": "http://rest2"}) == {
        "token": "tok-1",
        "uri": "http://rest2",
    }


def test_a_new_secret_value_replaces_the_old_one():
    assert merge_secrets({"token": "tok-1"}, {"token": "tok-2"}) == {"token": "tok-2"}


def test_a_blank_non_secret_value_is_taken_as_sent():
    assert merge_secrets({"warehouse": "/lake"}, {"warehouse": ""}) == {"warehouse": ""}


def test_a_url_shown_masked_and_sent_back_keeps_its_password_even_under_a_plain_key():
    old = {"note": "s3://k:hunter2@bucket/x"}
    assert merge_secrets(old, mask_mapping(old)) == old


def test_keys_missing_from_the_submission_are_dropped_and_new_keys_are_taken():
    assert merge_secrets({"token": "t", "a": 1}, {"b": 2}) == {"b": 2}
    assert merge_secrets(None, {"token": "t"}) == {"token": "t"}


def test_merge_secrets_recurses_into_nested_mappings():
    old = {"auth": {"basic": {"username": "u", "password": "p4ss"}}, "uri": "http://x"}
    new = {"auth": {"basic": {"username": "u2", "password": MASK}}, "uri": "http://x"}
    assert merge_secrets(old, new) == {
        "auth": {"basic": {"username": "u2", "password": "p4ss"}},
        "uri": "http://x",
    }


# --- free text ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("connecting with password=hunter2-pass", "hunter2-pass"),
        ("catalog properties: {'uri': 'http://rest:8181', 'token': 'tok-abc-123'}", "tok-abc-123"),
        ("catalog properties: {'credential': 'client:s3cr3t'}", "s3cr3t"),
        ("storage config {'aws_secret_access_key': 'AKIAXXSECRET'}", "AKIAXXSECRET"),
        ('json body {"password": "pa ss word"}', "pa ss word"),
        ("opening postgresql://lake:pg-pass-9@db:5432/lake", "pg-pass-9"),
        ("broker at redis://:redis-pass-7@127.0.0.1:6379/0 is down", "redis-pass-7"),
        ("DSN=host=db user=lake password=kv-pass-3 dbname=lake", "kv-pass-3"),
        ("dsn: https://key123@sentry.example.com/4", "key123"),
        ("header Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", "9944b091"),
        ("header Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload", "eyJhbGci"),
        ("Authorization: abcdefgh12345", "abcdefgh12345"),
        ("SECRET_KEY='django-insecure-abc' loaded", "django-insecure-abc"),
        ("ada used api_key=k-777-k", "k-777-k"),
        ("retrying with credential=stream-secret-8", "stream-secret-8"),
        ("TokenError: token=abc-def-1", "abc-def-1"),
        ("options {'azure_storage_account_key': 'acct-key-9'}", "acct-key-9"),
        ("x-api-key: key-5-5-5", "key-5-5-5"),
        ("Server=x;Uid=u;Pwd=odbc-pw;Database=d", "odbc-pw"),
        ("https://acct.blob.core.windows.net/c?sv=2020&sig=sas-sig-1&se=1", "sas-sig-1"),
    ],
)
def test_secrets_in_text_are_masked(text, secret):
    masked = mask_text(text)
    assert secret not in masked
    assert MASK in masked


@pytest.mark.parametrize(
    "text",
    [
        "compacted 120 files of demo.orders into 3",
        "sqlglot.errors.TokenError: Error tokenizing 'select'",
        "PasswordResetWarning: expires soon",
        "tokens processed: 5",
        "aws_access_key_id=AKIAEXAMPLE",
        "oauth2-server-uri=https://idp/oauth token-endpoint=https://idp/token",
        "",
    ],
)
def test_ordinary_text_passes_unchanged(text):
    assert mask_text(text) == text


def test_mask_text_keeps_quotes_and_separators():
    assert mask_text("{'password': 'a,b;c'}") == f"{{'password': '{MASK}'}}"
    assert mask_text("token=abc&page=2") == f"token={MASK}&page=2"
    assert mask_text("postgresql://u:p%40ss@h/db") == f"postgresql://u:{MASK}@h/db"
    assert mask_text("table orders: 12 files, password=pw-1").startswith("table orders: 12 files")
    assert mask_text("header Authorization: Bearer abcdefgh123") == f"header Authorization: Bearer {MASK}"


def test_mask_text_masks_known_secret_values_wherever_they_appear():
    assert mask_text("db refused hunter2 (user cache)", secrets=["hunter2", None, ""]) == (
        f"db refused {MASK} (user cache)"
    )
    dsn = "postgresql://cache:pw-9x@db/results"
    assert mask_text(f"could not reach {dsn}; the password pw-9x was refused", secrets=[dsn]) == (
        f"could not reach postgresql://cache:{MASK}@db/results; the password {MASK} was refused"
    )
    keyword_dsn = "host=db user=cache password='kw pw'"
    assert "kw pw" not in mask_text("auth failed for 'kw pw'", secrets=[keyword_dsn])


def test_mask_text_leaves_non_strings_alone():
    assert mask_text(None) is None
