"""Theta sketches of Iceberg values, as Iceberg's ``ThetaSketchAgg`` builds them (see the package
docstring): MurmurHash3_x64_128 vectorised with numpy, the Iceberg single-value serialization of
Arrow columns, and a KMV theta sketch serialized as the Java DataSketches library writes it."""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_SEED = 9001
LG_K = 12
NOMINAL_ENTRIES = 1 << LG_K
MAX_THETA = (1 << 63) - 1

# --- MurmurHash3_x64_128, vectorised over values of one width -------------------------------------

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix(k: np.ndarray) -> np.ndarray:
    k = k ^ (k >> np.uint64(33))
    k = k * np.uint64(0xFF51AFD7ED558CCD)
    k = k ^ (k >> np.uint64(33))
    k = k * np.uint64(0xC4CEB9FE1A85EC53)
    return k ^ (k >> np.uint64(33))


def _word(rows: np.ndarray, start: int, width: int) -> np.ndarray:
    """The little-endian 64-bit word of ``width`` (at most 8) bytes at ``start`` of every row."""
    padded = np.zeros((rows.shape[0], 8), dtype=np.uint8)
    padded[:, :width] = rows[:, start : start + width]
    return padded.view("<u8").ravel().astype(np.uint64)


def murmur3_h1(rows: np.ndarray, seed: int = DEFAULT_SEED) -> np.ndarray:
    """The first 64 bits of MurmurHash3_x64_128 of every row of a (values, width) uint8 matrix."""
    count, length = rows.shape
    h1 = np.full(count, seed, dtype=np.uint64)
    h2 = h1.copy()
    with np.errstate(over="ignore"):
        for block in range(length // 16):
            k1, k2 = _word(rows, block * 16, 8), _word(rows, block * 16 + 8, 8)
            h1 ^= _rotl(k1 * _C1, 31) * _C2
            h1 = (_rotl(h1, 27) + h2) * np.uint64(5) + np.uint64(0x52DCE729)
            h2 ^= _rotl(k2 * _C2, 33) * _C1
            h2 = (_rotl(h2, 31) + h1) * np.uint64(5) + np.uint64(0x38495AB5)
        tail = length % 16
        start = length - tail
        if tail > 8:
            h2 ^= _rotl(_word(rows, start + 8, tail - 8) * _C2, 33) * _C1
        if tail:
            h1 ^= _rotl(_word(rows, start, min(tail, 8)) * _C1, 31) * _C2
        h1 ^= np.uint64(length)
        h2 ^= np.uint64(length)
        h1 = h1 + h2
        h2 = h2 + h1
        return _fmix(h1) + _fmix(h2)


def _seed_hash(seed: int) -> int:
    """DataSketches' 16-bit seed hash (MurmurHash3 of the seed as a long, seed 0)."""
    rows = np.frombuffer(struct.pack("<q", seed), dtype=np.uint8).reshape(1, 8)
    return int(murmur3_h1(rows, 0)[0]) & 0xFFFF


SEED_HASH = _seed_hash(DEFAULT_SEED)

# --- Iceberg single-value serialization of Arrow columns -------------------------------------------

#: Iceberg primitive type (pyiceberg class name) -> how its values are serialized.
KINDS = {
    "BooleanType": "bool",
    "IntegerType": "int32",
    "DateType": "int32",
    "LongType": "int64",
    "TimeType": "int64",
    "TimestampType": "int64",
    "TimestamptzType": "int64",
    "TimestampNanoType": "int64",
    "TimestamptzNanoType": "int64",
    "FloatType": "int32",  # the raw IEEE 754 bits, as Java's ByteBuffer.putFloat writes them
    "DoubleType": "int64",
    "StringType": "string",
    "BinaryType": "binary",
    "FixedType": "fixed",
    "UUIDType": "fixed",
    "DecimalType": "decimal",
}


def _fixed_rows(array: pa.Array, width: int) -> np.ndarray:
    """The values of a fixed-width array without nulls as a (values, width) uint8 matrix."""
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8)
    start = array.offset * width
    return raw[start : start + len(array) * width].reshape(-1, width)


def _int_rows(array: pa.Array, arrow_type: pa.DataType, width: int) -> np.ndarray:
    values = array.view(arrow_type).to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(values.astype(f"<i{width}", copy=False)).view(np.uint8).reshape(-1, width)


def _unscaled_bytes(row: np.ndarray) -> bytes:
    """Java's ``BigInteger.toByteArray()`` of a decimal128's unscaled value (16 bytes LE)."""
    value = int.from_bytes(row.tobytes(), "little", signed=True)
    length = (value if value >= 0 else ~value).bit_length() // 8 + 1
    return value.to_bytes(length, "big", signed=True)


def _hash_each(values: Iterable[bytes | str]) -> np.ndarray:
    import mmh3

    hashes = [mmh3.hash64(v, DEFAULT_SEED, signed=False)[0] for v in values if len(v)]
    return np.array(hashes, dtype=np.uint64)


def value_hashes(array: pa.Array, kind: str) -> np.ndarray:
    """The DataSketches hashes (``h1 >> 1``, zero dropped) of the Iceberg serialization of every
    non-null value of ``array``; a value's hash may appear more than once."""
    array = array.drop_null()
    if not len(array):
        return np.empty(0, dtype=np.uint64)
    if kind == "bool":
        rows = array.cast(pa.uint8()).to_numpy(zero_copy_only=False).astype(np.uint8).reshape(-1, 1)
    elif kind == "int32":
        rows = _int_rows(array, pa.int32(), 4)
    elif kind == "int64":
        rows = _int_rows(array, pa.int64(), 8)
    elif kind == "fixed":
        storage = array.storage if isinstance(array, pa.ExtensionArray) else array
        rows = _fixed_rows(storage, storage.type.byte_width)
    elif kind == "decimal":
        unique = pc.unique(array)  # equal values of one scale: equal unscaled values
        hashes = _hash_each(_unscaled_bytes(row) for row in _fixed_rows(unique, 16))
        return hashes[(hashes >> np.uint64(1)) != 0] >> np.uint64(1)
    elif kind in ("string", "binary"):
        hashes = _hash_each(pc.unique(array).to_pylist())
        return hashes[(hashes >> np.uint64(1)) != 0] >> np.uint64(1)
    else:
        raise ValueError(f"no single-value serialization for values of kind {kind!r}")
    hashes = murmur3_h1(rows) >> np.uint64(1)
    return hashes[hashes != 0]


# --- theta sketches ------------------------------------------------------------------------------


class ThetaSketch:
    """A KMV theta sketch: the hashes below ``theta``, at most ``NOMINAL_ENTRIES`` of them."""

    def __init__(self, theta: int = MAX_THETA, hashes: np.ndarray | None = None) -> None:
        self.theta = theta
        self.hashes = hashes if hashes is not None else np.empty(0, dtype=np.uint64)

    def update(self, hashes: np.ndarray) -> None:
        self._keep(np.union1d(self.hashes, hashes[hashes < np.uint64(self.theta)]))

    def merge(self, other: ThetaSketch) -> None:
        self.theta = min(self.theta, other.theta)
        bound = np.uint64(self.theta)
        self._keep(np.union1d(self.hashes[self.hashes < bound], other.hashes[other.hashes < bound]))

    def _keep(self, merged: np.ndarray) -> None:
        if len(merged) > NOMINAL_ENTRIES:
            self.theta = int(merged[NOMINAL_ENTRIES])
            merged = merged[:NOMINAL_ENTRIES]
        self.hashes = merged.astype(np.uint64, copy=False)

    @property
    def estimate(self) -> float:
        if self.theta == MAX_THETA:
            return float(len(self.hashes))
        return len(self.hashes) / (self.theta / float(1 << 63))

    def serialize(self) -> bytes:
        """The compact, ordered sketch in DataSketches' serial version 3, as the Java library
        writes it (``CompactSketch.toByteArray()``): an empty sketch carries no seed hash, a
        single entry the single-item flag, and the preamble the sampling probability 1.0."""
        count = len(self.hashes)
        estimating = self.theta < MAX_THETA
        empty = count == 0 and not estimating
        preamble = 3 if estimating else (1 if empty or count == 1 else 2)
        flags = 0b11010  # read-only, compact, ordered
        if empty:
            flags |= 0b100
        elif count == 1 and not estimating:
            flags |= 0b100000  # single item
        head = struct.pack("<BBBHBH", preamble, 3, 3, 0, flags, 0 if empty else SEED_HASH)
        if preamble > 1:
            head += struct.pack("<If", count, 1.0)
        if estimating:
            head += struct.pack("<Q", self.theta)
        return head + np.sort(self.hashes).astype("<u8").tobytes()
