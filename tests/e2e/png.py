"""A tiny PNG reader (zlib only) so a test can tell a screenshot is not blank.

Reads 8-bit grey, grey+alpha, RGB and RGBA images, non-interlaced (what Chromium writes),
undoing the five PNG row filters. Returns rows of pixel tuples.
"""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode(data: bytes) -> tuple[int, int, list[list[tuple[int, ...]]]]:
    """(width, height, rows of pixels) of a PNG file's bytes."""
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG")
    pos, idat, header = len(SIGNATURE), b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or color not in _CHANNELS or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {color}")
    bpp = _CHANNELS[color]
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[list[tuple[int, ...]]] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                upleft = prev[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + _paeth(left, up, upleft)) & 0xFF
        rows.append([tuple(line[x : x + bpp]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def encode(rows: list[list[tuple[int, int, int]]], filters: list[int]) -> bytes:
    """An RGB PNG with the given row filters (for testing :func:`decode`)."""
    height, width = len(rows), len(rows[0])
    raw = bytearray()
    prev = bytes(width * 3)
    for row, kind in zip(rows, filters, strict=True):
        line = bytes(c for px in row for c in px)
        out = bytearray()
        for i, value in enumerate(line):
            left = line[i - 3] if i >= 3 else 0
            up, upleft = prev[i], prev[i - 3] if i >= 3 else 0
            predictor = (0, left, up, (left + up) // 2, _paeth(left, up, upleft))[kind]
            out.append((value - predictor) & 0xFF)
        raw += bytes([kind]) + out
        prev = line

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        SIGNATURE
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(bytes(raw)))
        + chunk(b"IEND", b"")
    )
