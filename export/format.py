"""The .ember container: a 64-byte header, the flatbuffer, then aligned data segments.

Header (little-endian):
    0   8  magic  b"EMBR\\0\\0\\0\\0"
    8   4  format major      12  4  format minor
    16  8  flatbuffer offset 24  8  flatbuffer size
    32  8  data offset       40  8  data size
    48 16  reserved (zero)
Segment offsets in the flatbuffer are relative to the data offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"EMBR\0\0\0\0"
FORMAT_MAJOR = 1
FORMAT_MINOR = 0
HEADER_SIZE = 64
SEGMENT_ALIGN = 64          # every segment starts on a cache line
PAGE_ALIGN = 4096           # large segments start on a page so they map cleanly
LARGE_SEGMENT = 1 << 16     # bytes from which a segment is page-aligned

_HEADER = struct.Struct("<8sIIQQQQ16x")


@dataclass(frozen=True)
class Header:
    major: int
    minor: int
    fb_offset: int
    fb_size: int
    data_offset: int
    data_size: int

    def pack(self) -> bytes:
        return _HEADER.pack(MAGIC, self.major, self.minor, self.fb_offset, self.fb_size, self.data_offset,
                            self.data_size)

    @staticmethod
    def unpack(buf: bytes, file_size: int) -> "Header":
        from ember.runtime.errors import InvalidProgramError

        if len(buf) < HEADER_SIZE:
            raise InvalidProgramError(f"file is {len(buf)} bytes, smaller than the {HEADER_SIZE}-byte header")
        magic, major, minor, fbo, fbs, do, ds = _HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            raise InvalidProgramError("bad magic: this is not an .ember program")
        if major != FORMAT_MAJOR:
            raise InvalidProgramError(f"format version {major}.{minor} is not supported (reads {FORMAT_MAJOR}.x)")
        if fbo + fbs > file_size or do + ds > file_size:
            raise InvalidProgramError("header offsets point outside the file (truncated or corrupted)")
        return Header(major, minor, fbo, fbs, do, ds)


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def segment_alignment(size: int) -> int:
    return PAGE_ALIGN if size >= LARGE_SEGMENT else SEGMENT_ALIGN
