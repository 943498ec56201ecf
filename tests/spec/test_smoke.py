from storage.spec import format_adapters


def test_the_three_builtin_formats_are_registered_through_entry_points():
    assert {"iceberg", "delta", "hudi"} <= set(format_adapters())
