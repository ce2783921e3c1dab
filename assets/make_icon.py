#!/usr/bin/env python3
"""Writes icon.png (256x256 RGBA): a flame on a hearth, on a dark rounded square.
Standard library only: python3 assets/make_icon.py"""
import math
import struct
import zlib

W = H = 256


def px(x, y):
    r = 40
    cx, cy = min(max(x, r), W - 1 - r), min(max(y, r), H - 1 - r)
    if (x - cx) ** 2 + (y - cy) ** 2 > r * r:
        return (0, 0, 0, 0)
    fx, fy = 128, 160

    def inside(scale, yoff):
        rr = 56 * scale
        dx, dy = x - fx, y - (fy + yoff)
        if dx * dx + dy * dy <= rr * rr:
            return True
        top = fy + yoff - rr * 2.1
        if top <= y <= fy + yoff:
            t = (y - top) / (fy + yoff - top)
            return abs(dx + (1 - t) * 10 * scale) <= rr * math.sin(t * math.pi / 2)
        return False

    if inside(1.0, 0):
        if inside(0.55, 18):
            return (255, 236, 160, 255) if inside(0.28, 30) else (255, 190, 60, 255)
        return (232, 106, 36, 255)
    if 214 <= y <= 222 and 64 <= x <= 192:
        return (120, 84, 60, 255)
    return (34, 30, 28, 255)


def chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


rows = b"".join(b"\x00" + bytes(c for x in range(W) for c in px(x, y)) for y in range(H))
png = (
    b"\x89PNG\r\n\x1a\n"
    + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 6, 0, 0, 0))
    + chunk(b"IDAT", zlib.compress(rows, 9))
    + chunk(b"IEND", b"")
)
with open(__file__.rsplit("/", 1)[0] + "/icon.png" if "/" in __file__ else "icon.png", "wb") as f:
    f.write(png)
