"""Block checksums of a file: XXH3 per block (every open can afford it), and format 1's word sums."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .manifest import CHECK_BLOCK


def block_checksums(path: Path, algorithm: str = "xxh3_64", block_size: int = CHECK_BLOCK) -> list[str]:
    """One hash per `block_size` bytes of the file, as 16 hex digits. XXH3 runs at memory speed,
    so every open can afford it; `sum64` is format 1's wrapping word sum, kept to read old indexes.
    The file is read through one small buffer: hashing a segment never maps it into memory."""
    import xxhash

    buffer = bytearray(min(block_size, 4 << 20))
    hashes: list[str] = []
    with open(path, "rb", buffering=0) as handle:
        while True:
            hasher, total, left = xxhash.xxh3_64(), 0, block_size
            while left:
                count = handle.readinto(memoryview(buffer)[: min(left, len(buffer))])
                if not count:
                    break
                left -= count
                if algorithm == "xxh3_64":
                    hasher.update(memoryview(buffer)[:count])
                else:
                    total += _sum64(np.frombuffer(buffer, dtype=np.uint8, count=count))
            if left == block_size and hashes:
                break  # the file ended on a block boundary
            hashes.append(f"{hasher.intdigest() if algorithm == 'xxh3_64' else total % (1 << 64):016x}")
            if left:
                break
    return hashes


def _sum64(block: np.ndarray) -> int:
    whole = len(block) // 8 * 8
    total = int(np.add.reduce(block[:whole].view("<u8"), dtype=np.uint64)) if whole else 0
    total += int(block[whole:].astype(np.uint64).sum()) << 1
    return total % (1 << 64)
