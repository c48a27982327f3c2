"""Message body compression: what sysFlag says about a body, and undoing it.

A compressed body has sysFlag bit 0 (``SYSFLAG_COMPRESSED``) and, from 5.x producers, its
compression type in bits 8-10: 0 (a 4.x producer, which only knows zlib) or 3 = zlib,
1 = LZ4 frame, 2 = Zstandard. The client, the gRPC endpoint and the Spark reader inflate
bodies with this one function, and a producer compresses with ``compress_body`` in the type it
was told (``compress_type``: ZLIB, as 4.x and 5.x producers by default, LZ4 or ZSTD, as a 5.x
producer with ``setCompressType`` sends them). LZ4 (the frame format, as lz4-java's
``LZ4FrameOutputStream``) and Zstandard (``zstd-jni``'s stream) come from the ``lz4`` and
``zstandard`` packages, imported when a body needs them.
"""
from __future__ import annotations

import zlib

from mqcore.errors import RecordDecodeError
from mqcore.format import layout as L

COMPRESSION_LZ4 = 1
COMPRESSION_ZSTD = 2
COMPRESSION_ZLIB = 3
#: ``compress_type`` names (RocketMQ 5's ``CompressionType``) -> sysFlag type
COMPRESSION_TYPES = {"ZLIB": COMPRESSION_ZLIB, "LZ4": COMPRESSION_LZ4, "ZSTD": COMPRESSION_ZSTD}
#: compression types read as zlib: 0 is a 4.x producer's body, which carries no type
ZLIB_TYPES = (0, COMPRESSION_ZLIB)


def compression_type(sys_flag: int) -> int:
    """The compression type in sysFlag bits 8-10."""
    return (sys_flag & L.SYSFLAG_COMPRESSION_TYPE_MASK) >> 8


def compress_body(body: bytes, level: int, kind: str = "ZLIB") -> tuple[bytes, int]:
    """``body`` compressed as a Java producer compresses it, and the sysFlag bits it sets:
    zlib (RFC 1950) as ``Deflater(level)`` with ``COMPRESSED_FLAG | ZLIB`` (0x301, what a
    4.9.8 producer sets), an LZ4 frame (0x101) or a Zstandard frame at ``level`` (0x201)."""
    if kind == "ZLIB":
        return zlib.compress(body, level), L.SYSFLAG_COMPRESSED | L.SYSFLAG_COMPRESSION_ZLIB
    flag = L.SYSFLAG_COMPRESSED | (COMPRESSION_TYPES[kind] << 8) if kind in COMPRESSION_TYPES else 0
    if kind == "LZ4":
        import lz4.frame
        return bytes(lz4.frame.compress(body)), flag
    if kind == "ZSTD":
        import zstandard
        return zstandard.ZstdCompressor(level=max(1, level)).compress(body), flag
    raise RecordDecodeError(f"unknown compression type {kind!r}: one of {', '.join(COMPRESSION_TYPES)}")


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """The body a producer compressed, inflated by the type in ``sys_flag``.

    Raises ``RecordDecodeError`` for a corrupt body, an unknown type, or a type whose
    optional package is not installed (the message says which to install).
    """
    kind = compression_type(sys_flag)
    try:
        if kind in ZLIB_TYPES:
            return zlib.decompress(body)
        if kind == COMPRESSION_LZ4:
            import lz4.frame  # optional: only bodies of producers that chose LZ4
            return bytes(lz4.frame.decompress(body))
        if kind == COMPRESSION_ZSTD:
            import zstandard  # optional
            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(body))
    except ImportError as e:
        raise RecordDecodeError(f"a message body uses compression type {kind}; install {e.name} to read it") from e
    except zlib.error as e:
        raise RecordDecodeError(f"a compressed message body is corrupt: {e}") from e
    except Exception as e:  # lz4 and zstandard raise their own (RuntimeError, ZstdError) for corrupt input
        raise RecordDecodeError(f"a compressed message body (type {kind}) is corrupt: {e}") from e
    raise RecordDecodeError(f"unknown compression type {kind} in sysFlag {sys_flag:#x}")
