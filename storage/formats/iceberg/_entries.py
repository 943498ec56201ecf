"""A manifest's entries: fetched and joined ahead, then decoded to dicts or read still encoded.

``iter_joined`` fetches manifests a few ahead of the one being read (``_readahead``) and joins
each (frames and inflates it: ``_avro.join``) on the worker threads; ``manifest_entries`` decodes a
manifest's entries at once keeping only the fields listing needs (``KEEP``: the per-column sizes,
value counts and NaN counts are skipped, the statistics maps kept encoded); ``EncodedEntries``
leaves them encoded for the compiled listing loop to read straight into slices
(``_avro_native.plain_decode``), without the dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from storage.formats.iceberg._avro import (
    Joined,
    decode_joined,
    decoder_for,
    join,
    native_module,
    plain_decode,
    plain_layout,
)
from storage.formats.iceberg._avro_program import RAW
from storage.formats.iceberg._entry_checks import checked_entry
from storage.formats.iceberg._manifests import ManifestInfo, read_file
from storage.formats.iceberg._readahead import read_ahead
from storage.spec.errors import CorruptTable

# Fields of manifest_entry / data_file that listing uses; everything else is skipped while decoding.
# The statistics maps are kept "raw" (their encoded blocks, one bytes object each: ``LazyStats``
# and the pre-checks parse one when they read it); ``KEEP_DECODED`` decodes them, for a writer
# schema whose maps are not Iceberg's int-keyed arrays (the raw mode refuses those).
_STATS = ("null_value_counts", "lower_bounds", "upper_bounds")
KEEP_DECODED: dict[str, Any] = {
    "status": True,
    "snapshot_id": True,
    "sequence_number": True,
    "file_sequence_number": True,
    "data_file": {
        name: True
        for name in (
            "content",
            "file_path",
            "file_format",
            "partition",
            "record_count",
            "file_size_in_bytes",
            *_STATS,
            "split_offsets",
            "equality_ids",
            "referenced_data_file",
            "content_offset",
            "content_size_in_bytes",
            "first_row_id",
        )
    },
}
KEEP: dict[str, Any] = {
    **KEEP_DECODED,
    "data_file": {**KEEP_DECODED["data_file"], **dict.fromkeys(_STATS, RAW)},
}


DropFor = Callable[[ManifestInfo, Any], Any]  # a listing's ``drop`` (iter_manifests)


def iter_joined(
    file_io: Any, manifests: Iterable[ManifestInfo], drop: DropFor | None = None
) -> Iterator[tuple[ManifestInfo, Joined]]:
    """(manifest, its container joined) for each manifest, in order.

    The manifests are fetched and joined (framed and inflated: ``_avro.join``, which the
    compiled decoder does without the GIL) ahead on worker threads (``read_ahead``: a few at a
    time) while the caller decodes the current one, in its thread, so on two cores inflating
    overlaps decoding; ``manifests`` is pulled lazily, so a consumer that stops early reads only
    the manifests of the read-ahead window more. With ``drop`` (``iter_manifests``'s), the
    workers also skim each manifest's entries for its filter (``skim_joined``, without the
    GIL too), so the caller only decodes the entries kept."""

    def fetch(manifest: ManifestInfo) -> Joined:
        data = read_file(file_io, manifest.path, "manifest")
        try:
            joined = join(bytes(data))
        except Exception as exc:  # any framing or inflating failure (see _avro.join)
            raise _corrupt(manifest, exc) from exc
        if drop is None:
            return joined
        return skim_joined(joined, _keep_for(joined.schema), _dropper(manifest, drop))

    return read_ahead(manifests, fetch, weight=_manifest_length)


def _manifest_length(manifest: ManifestInfo) -> int:
    """The length its list gives (0 where it gives none: a null is read as None)."""
    length = manifest.length
    return length if isinstance(length, int) and length > 0 else 0


def skim_joined(joined: Joined, keep: dict[str, Any], drop: Any) -> Joined:
    """``joined`` with its entries skimmed for the filter ``drop(decoder)`` gives (``skim_entries``,
    which runs without the GIL: a read-ahead thread does it for the next manifest while the
    consumer decodes this one), for ``decode_joined``; ``joined`` itself without the compiled
    decoder or a filter, or when anything fails here (decoding the manifest reports it)."""
    native = native_module()
    if native is None:
        return joined
    try:
        decoder = decoder_for(joined.schema, keep)
        spec = drop(decoder)
        if spec is None:
            return joined
        program = decoder.program()
        skims = tuple(
            native.skim_entries(payload, count, program, spec) for payload, count in joined.payloads
        )
    except Exception:  # noqa: BLE001 - only work done ahead: decode_joined reads it again and raises
        return joined
    return replace(joined, skimmed=(spec, skims))


def _dropper(manifest: ManifestInfo, drop: DropFor) -> Callable[[Any], Any]:
    """``drop`` for ``manifest``'s decoder: none for a schema whose entries are checked one by one
    (``checked_entry`` must see every record: nothing dropped unchecked)."""
    return lambda decoder: drop(manifest, decoder) if decoder.well_typed else None


def iter_manifests(
    file_io: Any, manifests: Iterable[ManifestInfo], drop: DropFor | None = None
) -> Iterator[tuple[ManifestInfo, list[dict[str, Any]], dict[int, str]]]:
    """(manifest, its entries, partition field id -> Avro name) for each manifest, in order,
    fetched and joined ahead (``iter_joined``) and decoded here (``manifest_entries``).

    ``drop(manifest, decoder)`` may return the filter of the compiled ``decode_filtered``
    (``_avro.decode_joined``): the entries the caller would drop are left out while decoding."""
    for manifest, joined in iter_joined(file_io, manifests, drop):
        records, names = manifest_entries(manifest, joined, drop)
        yield manifest, records, names


def _corrupt(manifest: ManifestInfo, exc: Exception) -> CorruptTable:
    return CorruptTable(f"manifest {manifest.path} is not a valid Iceberg manifest: {exc!r}")


def manifest_entries(
    manifest: ManifestInfo, data: bytes | Joined, drop: DropFor | None = None
) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """Every entry of one manifest (its bytes, or them joined by ``_avro.join``), decoded with
    the ``KEEP`` fields and checked as ``checked_entry`` checks, and the manifest's partition
    field id -> Avro name; ``CorruptTable`` naming the manifest when it cannot be decoded or an
    entry lacks what listing relies on. The per-entry check is skipped when the writer schema
    already guarantees it (``ManifestDecoder.well_typed``: the common shape)."""
    try:
        joined = data if isinstance(data, Joined) else join(data)
        dropper = _dropper(manifest, drop) if drop else None
        decoder, records = decode_joined(joined, _keep_for(joined.schema), drop=dropper)
        if not decoder.well_typed:
            for record in records:
                checked_entry(record)
    except CorruptTable:
        raise
    except Exception as exc:  # any decoding failure (see _entry_checks.checked_entry)
        raise _corrupt(manifest, exc) from exc
    return records, decoder.partition_names


class EncodedEntries:
    """One manifest's entries still encoded (its container joined), for the compiled
    ``plain_decode`` to read straight into slices (``index._manifest_slices``): only for a writer
    schema whose entries need no per-entry check (``ManifestDecoder.well_typed``); ``records()``
    decodes them as ``manifest_entries`` does, for the loops that need the dicts."""

    def __init__(self, manifest: ManifestInfo, joined: Joined) -> None:
        self.manifest, self.joined = manifest, joined
        try:
            self.decoder = decoder_for(joined.schema, _keep_for(joined.schema))
        except Exception as exc:  # a schema neither decoder reads (see _keep_for)
            raise _corrupt(manifest, exc) from exc
        self.partition_names: dict[int, str] = self.decoder.partition_names

    def records(self) -> list[dict[str, Any]]:
        return manifest_entries(self.manifest, self.joined)[0]

    def layout(self, keys: tuple[str, ...]) -> Any:
        """``plain_decode``'s layout for these entries with partition ``keys``, or None: not
        compiled, a schema whose entries are checked one by one, or entries not shaped as
        ``plain_slices`` reads them."""
        if plain_layout is None or not self.decoder.well_typed:
            return None
        try:
            program = self.decoder.program()
        except ValueError:  # a schema the compiler cannot read: records() says so, as decoding does
            return None
        return plain_layout(program, keys)

    def slices(
        self, layout: Any, scan: tuple[Any, ...], one: Callable[[Any], Any], chunk: int
    ) -> Iterator[list[Any]]:
        """The slices ``plain_slices`` gives for these entries, a list per ``chunk`` entries read
        straight from the encoded entries; ``CorruptTable`` naming the manifest for entries that
        cannot be decoded (an error of ``one`` is raised as it is)."""
        failed_in_one = False

        def guarded(record: dict[str, Any]) -> Any:
            nonlocal failed_in_one
            try:
                return one(record)
            except BaseException:
                failed_in_one = True
                raise

        for payload, count in self.joined.payloads:
            offset = 0
            for start in range(0, count, chunk):
                try:
                    found, offset = plain_decode(
                        layout, payload, offset, min(chunk, count - start), scan, guarded
                    )
                except Exception as exc:
                    if failed_in_one:
                        raise
                    raise _corrupt(self.manifest, exc) from exc
                yield found


def _keep_for(schema: str) -> dict[str, Any]:
    """``KEEP``, or ``KEEP_DECODED`` for a writer schema whose statistics maps cannot be kept raw
    (a schema neither can read fails later, decoding, as a corrupt manifest)."""
    try:
        decoder_for(schema, KEEP)
    except ValueError:
        return KEEP_DECODED
    return KEEP
