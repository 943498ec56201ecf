"""Iceberg maintenance: rewrite (compaction), deletes, expire snapshots, orphan files, statistics
and manifests, each an action module with its factory; ``plan``, ``lineage``, ``batches`` and
``validation`` are what the actions share. The write side of the format (snapshot producer,
manifests, Puffin) lives beside its read side in ``storage.formats.iceberg.commit``."""
