"""The spec conformance suite (tests/spec/test_conformance.py) over Paimon tables written here by
pypaimon: a primary-key table (updates by key, an overwritten partition) and an append-only one
(an overwrite), each answer compared with what pypaimon itself lists and reads at every snapshot."""

from __future__ import annotations

import pytest

from storage.spec.models import ReadingMode
from tests.plugins._paimon_tables import (
    pypaimon_files,
    pypaimon_read,
    pypaimon_table,
    write_append_table,
    write_primary_key_table,
)
from tests.spec.test_conformance import *  # noqa: F403 - the suite's test functions, collected here
from tests.spec.test_conformance import ConformanceCase, Reference

FILTERS = ("region = 'eu'", "id >= 20", "v like 'b%'", "region = 'apac' or id < 3")


def paimon_reference(location: str) -> Reference:
    snapshots = pypaimon_table(location).snapshot_manager().list_snapshots()
    ids = [s.id for s in snapshots]
    return Reference(
        instant_ids=ids,
        timestamps_ms=[s.time_millis for s in snapshots],
        current_id=pypaimon_table(location).snapshot_manager().get_latest_snapshot().id,
        files=[pypaimon_files(location, **{"scan.snapshot-id": i}) for i in ids],
        rows=[pypaimon_read(location, **{"scan.snapshot-id": i}).num_rows for i in ids],
    )


@pytest.fixture(scope="module", params=["paimon-primary-key", "paimon-append-only"])
def conformance_table(request, tmp_path_factory) -> ConformanceCase:
    from lakewarden_paimon import PaimonAdapter

    warehouse = str(tmp_path_factory.mktemp("paimon"))
    writer = write_primary_key_table if request.param == "paimon-primary-key" else write_append_table
    location = writer(warehouse)
    return ConformanceCase(
        name=request.param,
        table=PaimonAdapter.open(location),
        root=location,
        reference=paimon_reference(location),
        filters=FILTERS,
        key_column="id",
        unsupported_mode=ReadingMode.READ_OPTIMIZED,
        cuts_files=False,
    )


def test_the_reference_tables_have_several_snapshots_with_merged_keys(conformance_table):
    reference = conformance_table.reference
    assert len(reference.instant_ids) >= 5
    if conformance_table.name == "paimon-primary-key":
        # 30 keys in eu/us updated in place, apac overwritten by 6 rows: merge-on-read
        assert reference.rows == [30, 30, 40, 40, 36, 36]
