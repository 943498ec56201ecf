"""Delta maintenance: rewrite (compaction and the purge of deletion vectors), vacuum and
checkpoint, each an action module with its factory. The commit writer lives beside the format's
read side in ``storage.formats.delta.commit``."""
