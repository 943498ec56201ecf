"""Tools for developing and trying Lakewarden, not part of the product: the SeaweedFS launcher
(an S3 store and Iceberg REST catalog for tests, benchmarks and ``LAKEWARDEN_DEMO_STORAGE=s3 make
demo``) and the demo lakehouse builder (``manage.py lakewarden_demo``)."""
