"""The commit of an Iceberg compaction, to the standard of Iceberg's own ``RewriteFiles``.

``RewriteFiles`` is a pyiceberg snapshot producer whose snapshot is a ``replace``: data files are
only moved, so streaming readers (Spark structured streaming, Flink incremental reads) skip it.
pyiceberg 0.12 offers no such producer (its summary code refuses ``replace``, and its overwrite
matches the files to remove by path, which would drop every deletion vector of a Puffin file that
holds the vectors of several data files). This one:

* removes data files by path and deletion vectors by (Puffin path, ``referenced_data_file``,
  ``content_offset``): a manifest holding any of them is rewritten with those entries DELETED (in
  this snapshot) and every other live entry EXISTING, all its fields kept (a vector's Puffin path,
  referenced data file, offset and size; sequence numbers and snapshot ids made explicit; in v3
  the inherited ``first_row_id`` of each data file written out, so row ids do not move); entries
  already deleted in an earlier snapshot are dropped, as Java does; other manifests are kept as
  they are;
* adds the new data files in one manifest of the output partition spec;
* writes the manifest list of the table's format version (v3: ``first_row_id`` assigned to the
  data manifests without one, ``first-row-id`` and ``added-rows`` on the snapshot, as Java's
  manifest list writer does);
* computes the summary with pyiceberg's collector (removed vectors count as removed position
  delete files with their blob size, plus ``removed-dvs``), operation ``replace``.

Manifests are read and written through pyiceberg's Avro layer with the v3 schemas, a superset
that keeps the v3 fields pyiceberg's own readers drop. A planned file or vector that is not live in
the parent snapshot makes the commit fail with ``ValidationException``, and so does a commit the
catalog refused (no retry inside pyiceberg): the caller validates at the new head and commits
again.

pyiceberg 0.12 cannot serialise v3 table metadata, so a metastore catalog (SQL) cannot commit to a
v3 table; ``v3_metadata_writes`` lets the catalog write it for the commit (see there).

The new files' partition records come from ``OutputPartitioner`` (rows of files of another spec are
split by their output-spec partition in the Spark task; ``encode_partition`` carries the key back).

Delete files (position and equality delete files; vectors go by ``removed_dvs``) are moved the same
way (v2 and later; a v3 table takes no new position delete files, the spec's vectors replace them),
as Java's ``RewriteFiles.deleteFile``/``addFile(deleteFile, dataSequenceNumber)`` do it: removed by
path (``removed_deletes``), the entries DELETED in their rewritten delete manifest; added
(``added_deletes``, ``NewDeleteFile``) in a new delete manifest per partition spec, each entry
carrying the data sequence number it is given: the rewrite of delete files keeps the one of the
deletes it replaces, so the new file applies to the same data files (a data file is deleted from
by a position delete of a data sequence number at least its own, and by an equality delete of a
greater one). Their file sequence number is the new snapshot's. The summary counts them as
Iceberg does (``added-position-delete-files``, ``removed-equality-delete-files``...).

The package: ``manifests`` (reading and writing manifests with every field), ``producer``
(``RewriteFiles``), ``metadata`` (v3 metadata through a SQL catalog), ``partitions`` (the output
spec's partitions).
"""

from __future__ import annotations

from storage.formats.iceberg.commit.manifests import (
    CONTENT_OFFSET,
    CONTENT_SIZE,
    FIRST_ROW_ID,
    MANIFEST_FIRST_ROW_ID,
    REFERENCED_DATA_FILE,
    V3_DATA_FILE,
    V3_MANIFEST_FILE,
    DeleteManifestWriterV2,
    DVKey,
    ManifestListWriterV3,
    ManifestWriterV3,
    as_v3,
    dv_key,
    read_entries,
    read_manifest_list,
)
from storage.formats.iceberg.commit.metadata import check_v3_metadata, v3_metadata_writes, write_metadata
from storage.formats.iceberg.commit.partitions import (
    OutputPartitioner,
    decode_partition,
    encode_partition,
)
from storage.formats.iceberg.commit.producer import NewDeleteFile, RewriteFiles, delete_key

__all__ = [
    "CONTENT_OFFSET",
    "CONTENT_SIZE",
    "FIRST_ROW_ID",
    "MANIFEST_FIRST_ROW_ID",
    "REFERENCED_DATA_FILE",
    "V3_DATA_FILE",
    "V3_MANIFEST_FILE",
    "DVKey",
    "DeleteManifestWriterV2",
    "ManifestListWriterV3",
    "ManifestWriterV3",
    "NewDeleteFile",
    "OutputPartitioner",
    "RewriteFiles",
    "as_v3",
    "check_v3_metadata",
    "decode_partition",
    "delete_key",
    "dv_key",
    "encode_partition",
    "read_entries",
    "read_manifest_list",
    "v3_metadata_writes",
    "write_metadata",
]
