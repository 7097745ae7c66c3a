"""Incremental Content-Encoding decoding for the RECORDED copy of a body.

The proxy and the hooks pass the upstream's bytes on untouched (compressed if they were); the
record stores the decoded body, as HAR does, so ingest can read it. Chunk lengths in the record
are decoded lengths at the time the compressed bytes arrived, which is what `normalise` needs to
map an event's body offset to its arrival time.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

import zstandard


class _Decoder(Protocol):
    def decode(self, data: bytes) -> bytes: ...
    def flush(self) -> bytes: ...


class _Zlib:
    def __init__(self, wbits: int) -> None:
        self._obj = zlib.decompressobj(wbits)
        self._raw_fallback = wbits == zlib.MAX_WBITS  # "deflate" is sometimes sent raw
        self._started = False

    def decode(self, data: bytes) -> bytes:
        if not self._started and self._raw_fallback:
            self._started = True
            try:
                return self._obj.decompress(data)
            except zlib.error:
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
        self._started = True
        return self._obj.decompress(data)

    def flush(self) -> bytes:
        return self._obj.flush()


class _Zstd:
    def __init__(self) -> None:
        self._obj = zstandard.ZstdDecompressor().decompressobj()

    def decode(self, data: bytes) -> bytes:
        out: bytes = self._obj.decompress(data)
        return out

    def flush(self) -> bytes:
        return b""


class _Brotli:
    def __init__(self, module: Any) -> None:
        self._obj = module.Decompressor()

    def decode(self, data: bytes) -> bytes:
        out: bytes = self._obj.process(data)
        return out

    def flush(self) -> bytes:
        return b""


def _decoder_for(coding: str) -> _Decoder | None:
    if coding in ("gzip", "x-gzip"):
        return _Zlib(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return _Zlib(zlib.MAX_WBITS)
    if coding == "zstd":
        return _Zstd()
    if coding == "br":
        try:
            import brotli  # optional: only when the upstream compresses with brotli
        except ImportError:
            return None
        return _Brotli(brotli)
    return None


class BodyDecoder:
    """Decodes a body chunk by chunk; if an encoding cannot be decoded the raw bytes are kept
    from then on and `error` says why (the record stays honest rather than half-decoded)."""

    def __init__(self, content_encoding: str | None) -> None:
        codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        self.error: str | None = None
        self._chain: list[_Decoder] = []
        for coding in reversed(codings):  # applied in order, so undone in reverse
            decoder = _decoder_for(coding)
            if decoder is None:
                self.error = f"body kept as sent: content-encoding {coding!r} not decodable here"
                self._chain = []
                break
            self._chain.append(decoder)
        self._failed = False

    def decode(self, data: bytes) -> bytes:
        if not self._chain or self._failed:
            return data
        try:
            for decoder in self._chain:
                data = decoder.decode(data)
        except (zlib.error, zstandard.ZstdError, OSError, ValueError) as exc:
            self._failed = True
            self.error = f"content-encoding could not be decoded ({exc}); the rest is kept as sent"
            return b""
        return data

    def flush(self) -> bytes:
        if not self._chain or self._failed:
            return b""
        out = b""
        try:
            for decoder in self._chain:
                out = decoder.decode(out) + decoder.flush()
        except (zlib.error, zstandard.ZstdError, OSError, ValueError) as exc:
            self.error = f"content-encoding could not be decoded at end ({exc})"
            return b""
        return out
