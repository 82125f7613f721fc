"""Merging the packs of a store's history, so that there are few of them.

`StoreHistory.pack` moves loose objects into packs of at most PACK_AFTER objects each
(libgit2 holds a whole pack in memory while building it). Left so, a daemon that takes
a million writes would keep about a thousand packs, each open and mapped by every
reader. After packing, `rollup` picks the packs to merge as ``git repack --geometric=2``
does: the smallest ones are rolled into one until each pack holds at least twice the
objects of the next smaller, so N objects are in at most log2(N / PACK_AFTER) + 1
packs, and an object is copied about log2(N / PACK_AFTER) times in its life.

`merge` copies the packs' entries byte for byte, without inflating or re-deltifying
them: a pack file is a 12-byte header, its entries and a SHA-1 of all that; a delta
entry names its base by id or by how far back in its pack the base starts, which a
concatenation keeps. So the merged pack is the packs' entries one after another, and
its index (git's ``.idx`` version 2: a fan-out table, then the ids in order, their
CRC-32s, their offsets) is their indexes merged in id order, each offset moved by where
its pack's entries now start. Memory stays a few buffers whatever the packs hold; the
CPU is one SHA-1 over the bytes and a merge of the ids.

An object found in several of the packs is copied once (see `_duplicates`: the history
writes each batch of commits as a pack of its own, which may repeat an object some pack
holds), the others' entries left out.

Readers and writers go on meanwhile. The merged pack and index are written under
temporary names (git's ``tmp_pack_``/``tmp_idx_``, which gc removes), fsynced (the old
packs may hold the durable head's objects) and renamed into place; the old packs are
removed only a grace period later (`finish`), index first: libgit2 opens a pack it
knows of when it first needs it, so a reader that listed the packs just before the
merge must still find them (StoreHistory reopens its Repository objects after a merge
and after the removal, so that they let go of the removed files).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import heapq
import mmap
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from io import BufferedRandom, BufferedReader
from pathlib import Path

from memfs.store import crashpoints

OFS_DELTA = 6  # an entry's type: a delta whose base is the entry that far back
FACTOR = 2  # each pack at least this many times the objects of the next smaller
INDEX_MAGIC = b"\377tOc\0\0\0\2"  # git's pack index, version 2
FANOUT = 256 * 4
LARGE = 0x80000000  # an offset with this bit names an entry of the 8-byte table
CHUNK = 1 << 20
# A pack git marks so (kept by an operator, cruft with its mtimes, a partial clone's)
# is git's to manage: never merged.
MARKS = (".keep", ".mtimes", ".promisor")
SIBLINGS = (".pack", ".rev", ".bitmap")  # what a merged pack's removal removes


class PackError(ValueError):
    """A pack or index is not what its format or its index says."""


@dataclass(frozen=True)
class Pack:
    index: Path  # objects/pack/pack-HEX.idx
    count: int  # objects in it

    @property
    def data(self) -> Path:
        return self.index.with_suffix(".pack")


def listed(directory: Path) -> list[Pack]:
    """The packs in ``directory`` (``objects/pack``) that a merge may take, fewest
    objects first: each with its pack file and a version 2 index, and no mark."""
    found = []
    for index in directory.glob("pack-*.idx"):
        if not index.with_suffix(".pack").exists() or any(
                index.with_suffix(mark).exists() for mark in MARKS):
            continue
        try:
            with index.open("rb") as handle:
                head = handle.read(len(INDEX_MAGIC) + FANOUT)
        except FileNotFoundError:
            continue  # removed meanwhile (another daemon merged it)
        if len(head) == len(INDEX_MAGIC) + FANOUT and head.startswith(INDEX_MAGIC):
            found.append(Pack(index, int.from_bytes(head[-4:], "big")))
    return sorted(found, key=lambda pack: (pack.count, pack.index.name))


def rollup(packs: list[Pack]) -> list[Pack]:
    """The smallest of ``packs`` (fewest objects first) to merge into one so that each
    pack then holds at least FACTOR times the objects of the next smaller one (git's
    ``repack --geometric`` choice); [] when they already do."""
    counts = [pack.count for pack in packs]
    split = len(counts) - 1
    while split > 0 and counts[split] >= FACTOR * counts[split - 1]:
        split -= 1  # the largest packs that already progress geometrically stay
    if split:
        split += 1
    total = sum(counts[:split])
    while split < len(counts) and counts[split] < FACTOR * total:
        total += counts[split]  # the merged pack would be too close to this one
        split += 1
    return packs[:split] if split >= 2 else []


def merge(packs: list[Pack], record: Path) -> Path:
    """Write one pack holding every object of ``packs`` once, then remove them; returns
    the new index. ``record``: a file (outside ``objects``) naming the packs to remove
    while they are removed, so that `finish` completes a merge a crash cut short
    (else its packs would stay, their objects in two packs). Raises OSError, or
    PackError (then nothing changed)."""
    directory = packs[0].index.parent
    token = secrets.token_hex(8)
    data, index = directory / f"tmp_pack_{token}", directory / f"tmp_idx_{token}"
    try:
        left_out = _duplicates(packs)
        checksum, shifts = _concatenate(packs, data, left_out)
        _merge_indexes(packs, shifts, left_out, checksum, index)
        name = directory / f"pack-{checksum.hex()}"
        _write_durably(record, "".join(f"{n}\n" for n in [name.name, *(
            pack.index.stem for pack in packs)]))
        os.rename(data, name.with_suffix(".pack"))
        os.rename(index, name.with_suffix(".idx"))
    except BaseException:
        for path in (data, index):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        raise
    crashpoints.reached("history.packed")  # a pack in place, what it holds still elsewhere
    crashpoints.reached("history.packs-merged")
    return name.with_suffix(".idx")


def finish(record: Path, directory: Path, *, grace: float = 0.0) -> bool:
    """Complete the merge ``record`` names (see `merge`) once it is ``grace`` seconds
    old: its packs are removed if the merged one is in place, else it never was and
    they stay. Then the record goes. Returns whether packs were removed.

    The grace: a reader that listed the packs just before the merge may open one of the
    merged packs a moment later (libgit2 opens a pack it knows of when it first needs
    it); while the merged packs stay, it finds them, their objects being also in the
    merged pack."""
    try:
        if grace and time.time() - record.stat().st_mtime < grace:
            return False
        merged, *sources = record.read_text().split()  # written whole (_write_durably)
    except FileNotFoundError:
        return False
    landed = (directory / f"{merged}.idx").exists()
    if landed:
        _fsync_directory(directory)  # the merged pack's names are durable first
        for stem in sources:
            for suffix in (".idx", *SIBLINGS):  # the index first: a rescan skips the rest
                with contextlib.suppress(FileNotFoundError):
                    (directory / stem).with_suffix(suffix).unlink()
    record.unlink()
    return landed


def tidy(directory: Path, before: float) -> None:
    """Remove what a packing that a kill cut short left in ``directory`` and last
    changed before ``before`` (epoch seconds; a younger one may be another daemon's,
    being written): temporary files (``tmp_...``, libgit2's ``pack_git2_...``) and the
    files of a pack without an index."""
    for path in directory.iterdir():
        name = path.name
        temporary = name.startswith(("tmp_", "pack_git2_"))
        unindexed = name.startswith("pack-") and not path.with_name(
            name.split(".", 1)[0] + ".idx").exists()
        if not (temporary or unindexed):
            continue
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < before:
                path.unlink()


def _write_durably(path: Path, text: str) -> None:
    temporary = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
    with temporary.open("x") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_directory(path.parent)


def _concatenate(packs: list[Pack], target: Path,
                 left_out: list[list[tuple[int, int, bytes]]]) -> tuple[bytes, list[int]]:
    """Write the entries of ``packs`` one after another as one pack at ``target``
    (fsynced), but those of ``left_out`` (per pack, the (offset, length, id) of each
    entry to leave out, in order); returns its checksum and, for each pack, how far its
    entries moved (before what was left out of it)."""
    digest = hashlib.sha1()
    shifts = []
    buffer = memoryview(bytearray(CHUNK))
    count = sum(p.count for p in packs) - sum(len(out) for out in left_out)
    with target.open("xb") as out:
        head = b"PACK" + (2).to_bytes(4, "big") + count.to_bytes(4, "big")
        out.write(head)
        digest.update(head)
        position = len(head)
        for pack, leave in zip(packs, left_out, strict=True):
            with pack.data.open("rb") as source:
                header = source.read(12)
                if (header[:4] != b"PACK" or header[4:8] not in (b"\0\0\0\2", b"\0\0\0\3")
                        or int.from_bytes(header[8:], "big") != pack.count):
                    raise PackError(f"{pack.data}: not the pack its index describes")
                shifts.append(position - 12)
                end = os.fstat(source.fileno()).st_size - 20
                at = 12
                for start, length, _ in [*leave, (end, 0, b"")]:  # up to each left out
                    if start < at or start + length > end:
                        raise PackError(f"{pack.data}: shorter than its index says")
                    for chunk in _chunks(source, start - at, buffer):
                        out.write(chunk)
                        digest.update(chunk)
                    position += start - at
                    source.seek(start + length)
                    at = start + length
                if source.read(20) != _pack_checksum(pack.index):
                    raise PackError(f"{pack.data}: its index is of another pack")
        checksum = digest.digest()
        out.write(checksum)
        out.flush()
        os.fsync(out.fileno())
    return checksum, shifts


def _chunks(source: BufferedReader | BufferedRandom, size: int,
            buffer: memoryview) -> Iterator[memoryview]:
    """The next ``size`` bytes of ``source``, read into ``buffer`` a part at a time."""
    while size > 0:
        got = source.readinto(buffer[:min(len(buffer), size)])
        if not got:
            raise PackError(f"{source.name}: shorter than its index says")
        size -= got
        yield buffer[:got]


def _pack_checksum(index: Path) -> bytes:
    """The checksum of its pack that an index records (the 20 bytes before its own)."""
    with index.open("rb") as handle:
        handle.seek(-40, os.SEEK_END)
        return handle.read(20)


def _entries(table: mmap.mmap | bytes, count: int) -> Iterator[tuple[bytes, bytes, int]]:
    """(id, CRC-32, offset) of each object of a version 2 index, in id order."""
    ids = len(INDEX_MAGIC) + FANOUT
    crcs = ids + 20 * count
    offsets = crcs + 4 * count
    large = offsets + 4 * count
    for n in range(count):
        offset = int.from_bytes(table[offsets + 4 * n:offsets + 4 * n + 4], "big")
        if offset & LARGE:
            at = large + 8 * (offset & ~LARGE)
            offset = int.from_bytes(table[at:at + 8], "big")
        yield table[ids + 20 * n:ids + 20 * n + 20], table[crcs + 4 * n:crcs + 4 * n + 4], \
            offset


def _tables(packs: list[Pack], stack: contextlib.ExitStack) -> list[mmap.mmap]:
    """Each pack's index, mapped (closed with ``stack``); checked to be a version 2
    index of its count."""
    tables = []
    for pack in packs:
        with pack.index.open("rb") as source:
            table = stack.enter_context(mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ))
        if (len(table) < len(INDEX_MAGIC) + FANOUT + 28 * pack.count + 40
                or table[:len(INDEX_MAGIC)] != INDEX_MAGIC):
            raise PackError(f"{pack.index}: not a version 2 index of {pack.count} objects")
        tables.append(table)
    return tables


def _duplicates(packs: list[Pack]) -> list[list[tuple[int, int, bytes]]]:
    """Per pack, the (offset, length, id) of the entries to leave out of the merged pack,
    in offset order, so that it holds each object once (git's verify-pack refuses a
    pack with an object twice): the history writes each batch's objects as a pack of
    its own without asking which of them some pack holds already (an older version of
    a file written again, its folder's tree then too). Of the copies of an object the
    first one that must stay is kept: an entry is left out only if no delta of its
    pack is based on it or lies across it (a delta names its base by distance).
    Raises PackError when two copies must stay."""
    with contextlib.ExitStack() as stack:
        tables = _tables(packs, stack)
        copies: dict[bytes, list[tuple[int, int]]] = {}
        previous: tuple[bytes, int, int] | None = None
        for oid, number, offset in heapq.merge(*(
                _numbered(table, pack.count, number)
                for number, (table, pack) in enumerate(zip(tables, packs, strict=True)))):
            if previous is not None and previous[0] == oid:
                copies.setdefault(oid, [previous[1:]]).append((number, offset))
            previous = (oid, number, offset)
    if not copies:
        return [[] for _ in packs]
    layouts: dict[int, _Layout] = {}
    left_out: list[list[tuple[int, int, bytes]]] = [[] for _ in packs]
    for oid, found in copies.items():
        for number, _ in found:
            if number not in layouts:
                layouts[number] = _Layout(packs[number])
        keep = [(n, at) for n, at in found if not layouts[n].removable(at)] or found[:1]
        if len(keep) > 1:
            raise PackError(f"object {oid.hex()} is in {len(keep)} packs that each need it")
        for number, offset in found:
            if (number, offset) != keep[0]:
                left_out[number].append((offset, layouts[number].length(offset), oid))
    return [sorted(out) for out in left_out]


def _numbered(table: mmap.mmap, count: int, number: int) -> Iterator[tuple[bytes, int, int]]:
    """(id, ``number``, offset) of each object of an index, in id order."""
    for oid, _, offset in _entries(table, count):
        yield oid, number, offset


class _Layout:
    """Where a pack's entries start, and the spans its offset deltas cover."""

    def __init__(self, pack: Pack) -> None:
        with pack.index.open("rb") as source:
            index = source.read()
        self.starts = sorted(offset for _, _, offset in _entries(index, pack.count))
        self.end = pack.data.stat().st_size - 20
        self.spans: list[tuple[int, int]] = []  # (base, delta) of each offset delta
        with pack.data.open("rb") as source, \
                mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for start in self.starts:
                kind, at = (data[start] >> 4) & 7, start
                while data[at] & 0x80:  # the size's further bytes
                    at += 1
                if kind == OFS_DELTA:
                    at += 1
                    byte = data[at]
                    distance = byte & 0x7F
                    while byte & 0x80:
                        at += 1
                        byte = data[at]
                        distance = ((distance + 1) << 7) | (byte & 0x7F)
                    self.spans.append((start - distance, start))

    def removable(self, offset: int) -> bool:
        """No delta of the pack is based on this entry or lies across it."""
        return all(not base <= offset < delta for base, delta in self.spans)

    def length(self, offset: int) -> int:
        following = bisect.bisect_right(self.starts, offset)
        return (self.starts[following] if following < len(self.starts) else self.end) - offset


def _merge_indexes(packs: list[Pack], shifts: list[int],
                   left_out: list[list[tuple[int, int, bytes]]], checksum: bytes,
                   target: Path) -> None:
    """Write at ``target`` (fsynced) the index of the pack `_concatenate` made."""
    total = sum(pack.count for pack in packs) - sum(len(out) for out in left_out)
    with contextlib.ExitStack() as stack:
        tables = _tables(packs, stack)
        fanout = [0] * 256
        for table in tables:
            for n in range(256):
                at = len(INDEX_MAGIC) + 4 * n
                fanout[n] += int.from_bytes(table[at:at + 4], "big")
        for out in left_out:  # the left-out entries are counted no more
            for _, _, oid in out:
                for n in range(oid[0], 256):
                    fanout[n] -= 1
        gone = {(number, offset) for number, out in enumerate(left_out) for offset, _, _ in out}
        merged = heapq.merge(*(_moved(table, pack.count, shift, number, out)
                               for number, (table, pack, shift, out) in enumerate(
                                   zip(tables, packs, shifts, left_out, strict=True))))
        entries = ((oid, crc, offset) for oid, crc, offset, number, old in merged
                   if (number, old) not in gone)
        # The ids, CRCs and offsets go to their three tables at once (their places are
        # known from the count), each through its own buffered handle on the file.
        ids = stack.enter_context(target.open("xb"))
        ids.write(INDEX_MAGIC + b"".join(n.to_bytes(4, "big") for n in fanout))
        crcs = stack.enter_context(target.open("r+b"))
        crcs.seek(len(INDEX_MAGIC) + FANOUT + 20 * total)
        offsets = stack.enter_context(target.open("r+b"))
        offsets.seek(len(INDEX_MAGIC) + FANOUT + 24 * total)
        large: list[int] = []
        for oid, crc, offset in entries:
            ids.write(oid)
            crcs.write(crc)
            if offset >= LARGE:
                offsets.write((LARGE | len(large)).to_bytes(4, "big"))
                large.append(offset)
            else:
                offsets.write(offset.to_bytes(4, "big"))
        offsets.write(b"".join(n.to_bytes(8, "big") for n in large) + checksum)
    with target.open("r+b") as handle:  # the index's own checksum, over all of it
        digest = hashlib.sha1()
        for chunk in _chunks(handle, target.stat().st_size, memoryview(bytearray(CHUNK))):
            digest.update(chunk)
        handle.write(digest.digest())
        handle.flush()
        os.fsync(handle.fileno())


def _moved(table: mmap.mmap, count: int, shift: int, number: int,
           left_out: list[tuple[int, int, bytes]],
           ) -> Iterator[tuple[bytes, bytes, int, int, int]]:
    """(id, CRC-32, offset in the merged pack, pack number, offset in its pack) of each
    entry of a pack whose entries moved by ``shift``, less what was left out before it."""
    starts = [offset for offset, _, _ in left_out]
    removed = [0]
    for _, length, _ in left_out:
        removed.append(removed[-1] + length)
    for oid, crc, offset in _entries(table, count):
        before = removed[bisect.bisect_right(starts, offset - 1)] if starts else 0
        yield oid, crc, offset + shift - before, number, offset


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
