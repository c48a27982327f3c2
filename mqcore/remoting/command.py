"""RemotingCommand and its frame / header codecs (remoting-protocol.md §1, §2).

Frame layout (all big-endian)::

    +-----------------+---------------------------------+--------------+-------------+
    | length (int32)  | serializeType (1) | hdrLen (3)  | header bytes | body        |
    +-----------------+---------------------------------+--------------+-------------+
     length = 4 + hdrLen + bodyLen (the length field does not count itself)

:func:`encode` returns ``(prefix, body)`` so a server can hand a ``memoryview`` body
(a pull response sliced out of the commitlog mmap) to the transport without copying.
:func:`decode_frame` takes a frame *without* the 4-byte length prefix, like Netty's
``LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4)`` hands it to Java's decoder.

JSON headers are written exactly as fastjson writes a ``RemotingCommand`` bean
(top-level keys alphabetical, nulls omitted, fastjson string escaping), except that
``extFields`` keeps the caller's insertion order: Java emits ``HashMap`` order, which a
caller can reproduce with :func:`~mqcore.jsonutil.java_hashmap_order` when it
wants byte-identical output. Parsing is tolerant (see :func:`decode_header`).

Decoding malformed bytes raises :class:`~mqcore.errors.ProtocolError` and nothing
else; a frame above the size limit raises :class:`~mqcore.errors.FrameTooLargeError`.
Encoding a command that cannot be represented raises
:class:`~mqcore.errors.IllegalArgumentError` (caller misuse, not wire input).
"""
from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from mqcore.errors import FrameTooLargeError, IllegalArgumentError, ProtocolError
from mqcore.jsonutil import (
    _orjson,
    dumps_compact,
    fastjson_quote,
    loads_lenient,
    loads_strict,
)
from mqcore.remoting.codes import (
    CURRENT_VERSION,
    DEFAULT_MAX_FRAME_BYTES,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    ResponseCode,
    SerializeType,
)

__all__ = [
    "Body",
    "RemotingCommand",
    "create_request",
    "create_response",
    "encode",
    "encode_frame",
    "encode_header",
    "decode_frame",
    "decode_header",
    "parse_header_word",
    "loads_lenient",
    "FRAME_LENGTH_SIZE",
    "HEADER_WORD_SIZE",
]

#: a command's body: one buffer, or a list of buffers (bytes or memoryview) sent one after the
#: other (zero-copy pull answers, written with ``writelines``). The list's items are ``Any``,
#: not ``bytes | memoryview``: a received body is always one buffer and its readers call
#: ``bytes(cmd.body)``, which the precise item type would refuse at every such call
Body = Union[bytes, bytearray, memoryview, list[Any]]
#: a received frame or header: always one buffer
Frame = Union[bytes, bytearray, memoryview]

# --- frame layout ---------------------------------------------------------------------
FRAME_LENGTH_SIZE = 4  #: int32 length prefix (not counted in its own value)
HEADER_WORD_SIZE = 4  #: int32 (serializeType << 24) | hdrLen, first word of the frame
SERIALIZE_TYPE_SHIFT = 24
HEADER_LENGTH_MASK = 0xFFFFFF
_FRAME_PREFIX = struct.Struct(">II")  # length, header word
_HEADER_WORD = struct.Struct(">I")

# --- ROCKETMQ binary header layout (RocketMQSerializable) ------------------------------
BIN_CODE_OFFSET = 0  # int16
BIN_LANGUAGE_OFFSET = 2  # byte
BIN_VERSION_OFFSET = 3  # int16
BIN_OPAQUE_OFFSET = 5  # int32
BIN_FLAG_OFFSET = 9  # int32
BIN_REMARK_LEN_OFFSET = 13  # int32, then remark bytes
BIN_FIXED_SIZE = 17  # bytes before the remark
BIN_EXT_LEN_SIZE = 4  # int32 extFields byte length, after the remark
BIN_MIN_SIZE = BIN_FIXED_SIZE + BIN_EXT_LEN_SIZE  # 21: header with no remark, no fields
_BIN_FIXED = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remarkLen
_BIN_INT32 = struct.Struct(">i")
_BIN_INT16 = struct.Struct(">h")

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT16_MIN, _INT16_MAX = -(1 << 15), (1 << 15) - 1
_INT_TEXT = re.compile(r"[+-]?[0-9]+")


@dataclass(slots=True, repr=False)
class RemotingCommand:
    """One request or response.

    ``ext_fields`` maps header field names to strings (the custom header); ``body`` is
    raw bytes, possibly a ``memoryview`` on the send side. A decoded command always has
    a ``bytes`` body and a ``dict`` of ``str`` ext fields (never ``None``).
    Not thread-safe; commands are values handed from one owner to the next.
    """

    code: int
    language: int = LanguageCode.JAVA
    version: int = CURRENT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: Body = b""
    serialize_type: SerializeType = SerializeType.JSON
    #: set by the decoder when a header field could not be read although the frame
    #: could (e.g. an extFields value nested too deep to render): the request is
    #: answered with SYSTEM_ERROR naming the field instead of being processed
    decode_error: str | None = field(default=None, compare=False)
    #: the header already serialized by the code that built the command (a hot-path
    #: response whose header it can write in one step); ``encode`` sends it as is, so
    #: whoever sets it keeps it equal to what ``encode_header`` would give
    encoded_header: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def mark_response(self) -> None:
        self.flag |= FLAG_RESPONSE

    def mark_oneway(self) -> None:
        self.flag |= FLAG_ONEWAY

    @property
    def body_size(self) -> int:
        body = self.body
        if isinstance(body, list):
            return sum(b.nbytes if isinstance(b, memoryview) else len(b) for b in body)
        return body.nbytes if isinstance(body, memoryview) else len(body)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        return (
            f"RemotingCommand({kind} code={int(self.code)}, opaque={self.opaque}, flag={self.flag}, "
            f"language={_language_name(self.language)}, version={self.version}, remark={self.remark!r}, "
            f"ext_fields={self.ext_fields!r}, body=<{self.body_size} bytes>, "
            f"serialize_type={SerializeType(self.serialize_type).name})"
        )

    @classmethod
    def create_request(
        cls,
        code: int,
        ext_fields: Mapping[str, Any] | None = None,
        body: Body = b"",
        *,
        opaque: int = 0,
        oneway: bool = False,
        remark: str | None = None,
        language: int = LanguageCode.JAVA,
        version: int = CURRENT_VERSION,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        """A request. The sender (``Channel.invoke``) assigns the opaque; pass one only
        for byte-exact tests. Language defaults to JAVA because brokers have been
        tested most against Java clients."""
        return cls(
            code=code,
            language=language,
            version=version,
            opaque=opaque,
            flag=FLAG_ONEWAY if oneway else 0,
            remark=remark,
            ext_fields=_stringify_ext(ext_fields),
            body=body,
            serialize_type=serialize_type,
        )

    @classmethod
    def create_response(
        cls,
        request: RemotingCommand,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: Mapping[str, Any] | None = None,
        body: Body = b"",
    ) -> RemotingCommand:
        """A response to ``request``: same opaque and serialize type, flag bit 0 set,
        version V4_9_8 (Java clients gate features on the broker's version)."""
        return cls(
            code=code,
            language=LanguageCode.JAVA,
            version=CURRENT_VERSION,
            opaque=request.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=_stringify_ext(ext_fields),
            body=body,
            serialize_type=request.serialize_type,
        )


create_request = RemotingCommand.create_request
create_response = RemotingCommand.create_response


def _java_str(value: Any) -> str:
    """Render a header value as Java's ``toString`` would (``true``, ``4``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, (dict, list)):
        return dumps_compact(value, sort_keys=False).decode("utf-8", "surrogatepass")
    return str(value)


def _stringify_ext(ext_fields: Mapping[str, Any] | None) -> dict[str, str]:
    if not ext_fields:
        return {}
    if type(ext_fields) is dict:  # a header's to_ext(): already str -> str, so only copied
        for k, v in ext_fields.items():
            if type(v) is not str or type(k) is not str:
                break
        else:
            return ext_fields.copy()
    return {str(k): _java_str(v) for k, v in ext_fields.items() if v is not None}


def _language_name(language: int) -> str:
    try:
        return LanguageCode(language).name
    except ValueError:
        return str(language)


# ======================================================================================
# encoding
# ======================================================================================
def encode_header(cmd: RemotingCommand) -> bytes:
    """Serialize the header in ``cmd.serialize_type``."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        return _encode_binary_header(cmd)
    if cmd.serialize_type == SerializeType.JSON:
        return _encode_json_header(cmd)
    raise IllegalArgumentError(f"unknown serialize type {cmd.serialize_type!r}")


def encode(cmd: RemotingCommand) -> tuple[bytes, Body]:
    """Return ``(prefix, body)``: prefix = length + header word + header.

    Write both (``transport.write(prefix); transport.write(body)``) with no await in
    between. ``body`` is returned as given (no copy); it may be a list of buffers that
    together make the body (``transport.writelines``).
    """
    header = cmd.encoded_header
    if header is None:
        header = encode_header(cmd)
    header_len = len(header)
    if header_len > HEADER_LENGTH_MASK:
        raise IllegalArgumentError(f"header of {header_len} bytes exceeds the 24-bit header length field")
    body = cmd.body if cmd.body is not None else b""
    if isinstance(body, list):  # buffers sent one after the other (zero-copy pull answers)
        body_len = sum(b.nbytes if isinstance(b, memoryview) else len(b) for b in body)
    else:
        body_len = body.nbytes if isinstance(body, memoryview) else len(body)
    length = HEADER_WORD_SIZE + header_len + body_len
    if length > _INT32_MAX:
        raise IllegalArgumentError(f"frame of {length} bytes exceeds the int32 length field")
    word = (int(cmd.serialize_type) << SERIALIZE_TYPE_SHIFT) | header_len
    return _FRAME_PREFIX.pack(length, word) + header, body


def encode_frame(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included, as one ``bytes`` (copies the body)."""
    prefix, body = encode(cmd)
    if isinstance(body, list):
        return b"".join([prefix, *body])
    return prefix + bytes(body) if body else prefix


def _check_int(value: int, name: str, lo: int = _INT32_MIN, hi: int = _INT32_MAX) -> int:
    value = int(value)
    if not lo <= value <= hi:
        raise IllegalArgumentError(f"{name}={value} does not fit the header field [{lo}, {hi}]")
    return value


_LANGUAGE_NAMES = {int(m): m.name for m in LanguageCode}


#: orjson's escape of a control character with a hex letter (\u000b, \u001f): fastjson's is uppercase
_LOWER_HEX_ESCAPE = re.compile(rb"\\u00[01][a-f]")


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    fast = _encode_json_header_fast(cmd) if _orjson is not None else None
    return fast if fast is not None else _encode_json_header_fastjson(cmd)


def _encode_json_header_fast(cmd: RemotingCommand) -> bytes | None:
    """orjson writes what fastjson writes for the usual header (same key order, the same short
    escapes, raw UTF-8 elsewhere); None when a value needs a ``\\u`` escape (orjson's hex is
    lowercase, fastjson's uppercase), fastjson's extra escapes (U+007F-U+009F) or is not a
    plain string, so the careful writer takes over."""
    ext = cmd.ext_fields
    language = _LANGUAGE_NAMES.get(cmd.language)
    if language is None:
        return None
    obj: dict[str, Any] = {"code": _check_int(cmd.code, "code")}
    if ext or cmd.is_response:
        obj["extFields"] = ext
    obj["flag"] = _check_int(cmd.flag, "flag")
    obj["language"] = language
    obj["opaque"] = _check_int(cmd.opaque, "opaque")
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = _check_int(cmd.version, "version")
    try:
        out: bytes = _orjson.dumps(obj)
    except TypeError:  # a non-str ext value or key: the careful writer renders it the Java way
        return None
    if b"\x7f" in out or b"\xc2" in out or (b"\\u00" in out and _LOWER_HEX_ESCAPE.search(out) is not None):
        # fastjson's extra escapes, or a control character orjson escaped in lowercase hex
        # (\u001f) where fastjson writes uppercase (\u001F): the careful writer takes over.
        # Other control characters read the same in both (\u0001, \u0002: the separators
        # of every message's properties), so those headers stay on orjson.
        return None
    return out


def _encode_json_header_fastjson(cmd: RemotingCommand) -> bytes:
    parts = ['{"code":', str(_check_int(cmd.code, "code"))]
    ext = cmd.ext_fields
    if ext or cmd.is_response:  # Java responses always carry extFields; clients NPE without
        parts.append(',"extFields":{')
        sep = ""
        for key, value in ext.items():
            if key is None or value is None:
                continue
            parts.append(sep)
            parts.append(fastjson_quote(str(key)))
            parts.append(":")
            parts.append(fastjson_quote(_java_str(value)))
            sep = ","
        parts.append("}")
    parts.append(',"flag":%d' % _check_int(cmd.flag, "flag"))
    try:
        parts.append(',"language":"%s"' % LanguageCode(cmd.language).name)
    except ValueError:
        parts.append(',"language":%d' % _check_int(cmd.language, "language"))
    parts.append(',"opaque":%d' % _check_int(cmd.opaque, "opaque"))
    if cmd.remark is not None:
        parts.append(',"remark":')
        parts.append(fastjson_quote(cmd.remark))
    parts.append(',"serializeTypeCurrentRPC":"JSON","version":%d}' % _check_int(cmd.version, "version"))
    return "".join(parts).encode("utf-8")


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    remark = _utf8(cmd.remark) if cmd.remark else b""
    entries = bytearray()
    for key, value in cmd.ext_fields.items():
        if key is None or value is None:  # Java skips null keys/values
            continue
        kb, vb = _utf8(str(key)), _utf8(_java_str(value))
        if len(kb) > _INT16_MAX:
            raise IllegalArgumentError(f"extFields key of {len(kb)} bytes exceeds the int16 length field")
        entries += _BIN_INT16.pack(len(kb))
        entries += kb
        entries += _BIN_INT32.pack(len(vb))
        entries += vb
    language = _check_int(cmd.language, "language", 0, 0xFF)
    fixed = _BIN_FIXED.pack(
        _check_int(cmd.code, "code", _INT16_MIN, _INT16_MAX),
        language,
        _check_int(cmd.version, "version", _INT16_MIN, _INT16_MAX),
        _check_int(cmd.opaque, "opaque"),
        _check_int(cmd.flag, "flag"),
        len(remark),
    )
    return b"".join((fixed, remark, _BIN_INT32.pack(len(entries)), entries))


# ======================================================================================
# decoding
# ======================================================================================
_SERIALIZE_TYPES = {int(t): t for t in SerializeType}


def parse_header_word(word: int, frame_length: int) -> tuple[SerializeType, int]:
    """Split the header word and check it against the frame length (without prefix)."""
    serialize_byte = (word >> SERIALIZE_TYPE_SHIFT) & 0xFF
    header_len = word & HEADER_LENGTH_MASK
    serialize_type = _SERIALIZE_TYPES.get(serialize_byte)  # a dict, not the enum's slower call
    if serialize_type is None:
        raise ProtocolError(f"unknown serialize type {serialize_byte}")
    if HEADER_WORD_SIZE + header_len > frame_length:
        raise ProtocolError(f"header length {header_len} exceeds frame length {frame_length}")
    return serialize_type, header_len


def decode_frame(frame: Frame, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> RemotingCommand:
    """Decode one frame given *without* its 4-byte length prefix. The body is copied
    into ``bytes`` so the command does not pin the caller's buffer."""
    view = memoryview(frame).cast("B") if not isinstance(frame, bytes) else memoryview(frame)
    frame_length = view.nbytes
    if frame_length > max_frame_bytes:
        raise FrameTooLargeError(f"frame of {frame_length} bytes exceeds the limit of {max_frame_bytes}")
    if frame_length < HEADER_WORD_SIZE:
        raise ProtocolError(f"frame of {frame_length} bytes is shorter than the header word")
    (word,) = _HEADER_WORD.unpack_from(view, 0)
    serialize_type, header_len = parse_header_word(word, frame_length)
    header_end = HEADER_WORD_SIZE + header_len
    cmd = decode_header(serialize_type, view[HEADER_WORD_SIZE:header_end])
    cmd.body = bytes(view[header_end:])
    return cmd


def decode_header(serialize_type: int, header: Frame) -> RemotingCommand:
    """Decode a header (no body). JSON parsing is tolerant the way real 4.x peers need:

    * any JSON escape form; unknown keys ignored; missing ``extFields`` => ``{}``;
    * extFields values that are numbers/booleans become Java ``toString`` strings,
      ``null`` values are dropped (same as absent for every header reader);
    * ``language`` as a name or a number (unknown => OTHER);
    * numeric fields given as numeric strings are accepted.

    Binary: Java's "length 0 means null" quirk applies, so an empty remark decodes to
    ``None`` and ext entries with an empty key or value are dropped.
    """
    if serialize_type == SerializeType.JSON:
        return _decode_json_header(header)
    if serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary_header(header)
    raise ProtocolError(f"unknown serialize type {serialize_type!r}")


def _wire_int(obj: Mapping[str, Any], name: str, default: int | None) -> int:
    value = obj.get(name)
    if value is None:
        if default is None:
            raise ProtocolError(f"JSON header has no {name!r}")
        return default
    if isinstance(value, bool):
        raise ProtocolError(f"JSON header field {name!r} is a boolean")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value):
        value = int(value)
    if not isinstance(value, int):
        raise ProtocolError(f"JSON header field {name!r} is not an integer: {value!r}")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ProtocolError(f"JSON header field {name!r}={value} is out of int32 range")
    return value


def _wire_language(value: Any) -> int:
    if value is None:
        return LanguageCode.JAVA
    if isinstance(value, str):
        member = LanguageCode.__members__.get(value.upper())
        if member is not None:
            return member
        if _INT_TEXT.fullmatch(value):
            value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return LanguageCode(value)
        except ValueError:
            pass  # unknown number: fall through to OTHER, like the Go client's "unknown"
    return LanguageCode.OTHER


def _wire_ext_value(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value != value:  # NaN from a permissive parser
        return "NaN"
    try:
        return _java_str(value)
    except (ValueError, TypeError, UnicodeError, RecursionError) as e:  # RecursionError: deeply nested value
        raise ProtocolError(f"extFields value of type {type(value).__name__} cannot be rendered as a string: "
                            f"{type(e).__name__}") from None


_LANGUAGE_BY_NAME = {m.name: m for m in LanguageCode}


def _int32_field(obj: dict[str, Any], name: str, default: int | None) -> int:
    """The usual case (a JSON integer in range) without the tolerant parser's checks."""
    value = obj.get(name)
    if type(value) is int and _INT32_MIN <= value <= _INT32_MAX:
        return value
    return _wire_int(obj, name, default)


def _all_str(values: Any) -> bool:
    for value in values:
        if type(value) is not str:
            return False
    return True


def _decode_json_header(header: Frame) -> RemotingCommand:
    obj = loads_strict(header)
    if not isinstance(obj, dict):
        raise ProtocolError(f"JSON header is a {type(obj).__name__}, not an object")
    raw_ext = obj.get("extFields")
    ext: dict[str, str] = {}
    problem: str | None = None
    if type(raw_ext) is dict and _all_str(raw_ext.values()):
        ext = raw_ext  # the usual header: a fresh dict of strings from the parser, used as is
    elif raw_ext is not None:
        if not isinstance(raw_ext, dict):
            raise ProtocolError(f"JSON header extFields is a {type(raw_ext).__name__}, not an object")
        for key, value in raw_ext.items():
            try:
                text = _wire_ext_value(value)
            except ProtocolError as e:  # the frame is sound: answer the request with the error
                problem = problem or f"extFields[{str(key)[:64]!r}]: {e}"
                continue
            if text is not None:
                ext[key] = text
    remark = obj.get("remark")
    if remark is not None and not isinstance(remark, str):
        remark = _wire_ext_value(remark)
    language = obj.get("language")
    language = _LANGUAGE_BY_NAME.get(language) if type(language) is str else None
    return RemotingCommand(
        code=_int32_field(obj, "code", None),
        language=language if language is not None else _wire_language(obj.get("language")),
        version=_int32_field(obj, "version", 0),
        opaque=_int32_field(obj, "opaque", 0),
        flag=_int32_field(obj, "flag", 0),
        remark=remark,
        ext_fields=ext,
        serialize_type=SerializeType.JSON,
        decode_error=problem,
    )


def _text(view: memoryview, start: int, length: int, what: str) -> str:
    try:
        return str(view[start : start + length], "utf-8", "surrogatepass")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"binary header {what} is not valid UTF-8: {e}") from e


def _decode_binary_header(header: Frame) -> RemotingCommand:
    view = memoryview(header).cast("B") if not isinstance(header, bytes) else memoryview(header)
    size = view.nbytes
    if size < BIN_MIN_SIZE:
        raise ProtocolError(f"binary header of {size} bytes is shorter than {BIN_MIN_SIZE}")
    code, language, version, opaque, flag, remark_len = _BIN_FIXED.unpack_from(view, BIN_CODE_OFFSET)
    pos = BIN_FIXED_SIZE
    if remark_len < 0 or pos + remark_len + BIN_EXT_LEN_SIZE > size:
        raise ProtocolError(f"binary header remark length {remark_len} overruns the header ({size} bytes)")
    remark = _text(view, pos, remark_len, "remark") if remark_len else None
    pos += remark_len
    (ext_len,) = _BIN_INT32.unpack_from(view, pos)
    pos += BIN_EXT_LEN_SIZE
    if ext_len < 0 or pos + ext_len > size:
        raise ProtocolError(f"binary header extFields length {ext_len} overruns the header ({size} bytes)")
    ext = _decode_binary_ext(view, pos, pos + ext_len)
    try:
        language = LanguageCode(language)
    except ValueError:
        language = LanguageCode.OTHER
    return RemotingCommand(
        code=code,
        language=language,
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _decode_binary_ext(view: memoryview, pos: int, end: int) -> dict[str, str]:
    """Entries: int16 keyLen, key, int32 valLen, value. Zero lengths decode to Java
    null, and null keys/values are dropped."""
    ext: dict[str, str] = {}
    while pos < end:
        if pos + 2 > end:
            raise ProtocolError("binary header extFields entry truncated in key length")
        (key_len,) = _BIN_INT16.unpack_from(view, pos)
        pos += 2
        if key_len < 0 or pos + key_len + 4 > end:
            raise ProtocolError(f"binary header extFields key length {key_len} overruns the fields")
        key = _text(view, pos, key_len, "extFields key")
        pos += key_len
        (val_len,) = _BIN_INT32.unpack_from(view, pos)
        pos += 4
        if val_len < 0 or pos + val_len > end:
            raise ProtocolError(f"binary header extFields value length {val_len} overruns the fields")
        value = _text(view, pos, val_len, "extFields value")
        pos += val_len
        if key_len and val_len:
            ext[key] = value
    return ext
