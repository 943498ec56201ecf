"""Inline Delta deletion vectors whose Z85 blocks count past 2**32 (issue 29, item 18).

Five Z85 characters count up to 85**5 - 1 = 4,437,053,124, more than 32 bits hold. Delta's
``Base85Codec.decodeBlocks`` keeps the low 32 bits of each block (``putInt((int) sum)``), so a
block and the same block plus 2**32 decode to the same 4 bytes; the reader raised
``OverflowError`` on the second. Here the inline vector of a table is written per the protocol
(magic number, portable RoaringBitmapArray, Z85) with every block that can be written past 32
bits so written, and the rows read must be those the vector leaves.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from pyroaring import BitMap64

from storage.formats.delta import DeltaAdapter
from storage.formats.delta._dv import relative_path, z85_decode
from storage.spec.errors import CorruptTable
from tests.spec import _delta_log_writer as w
from tests.spec._delta_log_writer import _Z85
from tests.spec._delta_log_writer import inline_vector as _inline_vector
from tests.spec._delta_log_writer import z85 as _z85

MAGIC = 1681511377
DELETED = [0, 3, 7, 2**16 + 1]
ROWS = 2**16 + 4


def _past_32_bits(data: bytes) -> tuple[str, int]:
    """``data`` in Z85 as Delta pads it, every block whose number plus 2**32 still fits in five
    characters written as that larger number; returns the text and how many blocks were."""
    data += b"\0" * (-len(data) % 4)
    out, moved = [], 0
    for start in range(0, len(data), 4):
        (number,) = struct.unpack(">I", data[start : start + 4])
        if number + 2**32 < 85**5:
            number += 2**32
            moved += 1
        chars = []
        for _ in range(5):
            number, digit = divmod(number, 85)
            chars.append(_Z85[digit])
        out.append("".join(reversed(chars)))
    return "".join(out), moved


def _table(path, descriptor) -> DeltaAdapter:
    data = pa.table({"id": pa.array(range(ROWS), pa.int64())})
    add = w.data_file(path, data)
    add["add"]["deletionVector"] = descriptor
    protocol = {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors"],
        }
    }
    fields = [w.field("id", "long")]
    w.commit(
        path, 0, protocol, w.metadata(fields, configuration={"delta.enableDeletionVectors": "true"}), add
    )
    return DeltaAdapter.open(str(path))


def test_z85_blocks_past_32_bits_keep_their_low_32_bits_as_deltas_codec_does():
    assert z85_decode("#####") == (85**5 - 1 - 2**32).to_bytes(4, "big")  # 4437053124 -> 142085828
    plain = _z85(b"\x01\x00\x00\x00")
    wrapped, moved = _past_32_bits(b"\x01\x00\x00\x00")
    assert moved == 1 and wrapped != plain
    assert z85_decode(wrapped) == z85_decode(plain) == b"\x01\x00\x00\x00"


def test_an_inline_vector_written_past_32_bits_deletes_its_rows(tmp_path):
    descriptor = _inline_vector(DELETED)
    blob = struct.pack("<i", MAGIC) + BitMap64(DELETED).serialize()
    text, moved = _past_32_bits(blob)
    assert moved >= 3 and text != descriptor["pathOrInlineDv"]
    descriptor["pathOrInlineDv"] = text
    table = _table(tmp_path / "t", descriptor)
    ids = [row["id"] for batch in table.read() for row in batch.to_pylist()]
    assert len(ids) == ROWS - len(DELETED) == 65_536
    assert ids[:5] == [1, 2, 4, 5, 6]
    assert ids[-3:] == [2**16, 2**16 + 2, 2**16 + 3]
    assert not set(DELETED) & set(ids)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0000", "not a multiple of 5"),
        ("0000~", "'~' is not a Z85 character"),
        ("00000" * 3, "holds 12 bytes"),
    ],
)
def test_an_inline_vector_that_is_not_z85_is_a_corrupt_table(tmp_path, text, message):
    descriptor = {"storageType": "i", "pathOrInlineDv": text, "sizeInBytes": 40, "cardinality": 1}
    table = _table(tmp_path / "t", descriptor)
    with pytest.raises(CorruptTable, match=f"inline deletion vector .*{message}"):
        list(table.read())


def test_a_vector_file_name_that_is_not_z85_is_a_corrupt_table():
    with pytest.raises(CorruptTable, match="too short"):
        relative_path({"storageType": "u", "pathOrInlineDv": "ab"})
    with pytest.raises(CorruptTable, match="not a Z85 character"):
        relative_path({"storageType": "u", "pathOrInlineDv": "ab" + "~" * 20})
