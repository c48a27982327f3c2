"""Client wire kernels, pure-Python twin of the extension ``mqcore._wire_client``
(``mqcore/_wire_client.pyx``): one request frame in one step, one answer header read in
one step, one request/answer exchange on a non-blocking socket.

Why: a blocking ``Producer.send`` used to build a header object, an ext dict, a
``RemotingCommand``, a JSON document and a frame prefix (dozens of Python calls) for a
frame whose layout never changes. These kernels write (and read) the usual frame
directly. Both are *exact or nothing*: for any input they do not reproduce byte for
byte (resp. value for value) what the generic codec in :mod:`mqcore.remoting.command`
gives, they return None and the caller uses the generic codec, which also raises its
usual errors for bad input.

``encode_request_frame`` writes the frame ``encode_frame(create_request(...))`` gives
for a JSON request whose ext values are str / int / bool / None (None skipped). It
handles printable ASCII and the control characters whose escape is the same in
orjson's and fastjson's output (``\\b \\t \\n \\f \\r``, ``\\uXXXX`` with decimal digits
only, e.g. the ``\\u0001``/``\\u0002`` property separators); anything else (non-ASCII,
U+007F, ``\\u001A``-style escapes whose hex case differs between the two writers,
out-of-range numbers, an unknown type, the response flag) gives None.

``decode_json_answer`` reads a JSON header of the flat shape every broker writes
(string/integer members, an ``extFields`` object of plain strings, no escapes, no
floats, no nesting) into ``(code, opaque, flag, remark, ext)``; any other header
gives None (the generic decoder then decides, and raises on malformed input).

``send_template`` / ``SendTemplate`` are ``Producer.send``'s one call per message: the
frame of one queue's plain SEND_MESSAGE_V2 built once (``head``/``mid``/``tail``), the
message's born timestamp, flag, properties dict, opaque and body filled in by ``frame``,
and ``send`` = ``frame`` + ``exchange`` + the SendResult of the usual answer (see the
class). The frame is byte for byte ``encode_request_frame``'s for the same fields.

``exchange`` writes a whole request frame to a socket without blocking and reads its answer
until ``deadline`` (``time.monotonic()`` seconds; the compiled kernel waits with the
interpreter lock released). The socket is non-blocking, or blocking with SO_RCVTIMEO and
SO_SNDTIMEO of at most ``EXCHANGE_WAIT_SLICE_MS`` (``BlockingConnection``'s): then the read
waits in the read system call itself while more than a slice is left (one system call per
answer, not poll + read), and in ``poll`` for the last slice, so the deadline holds either
way. (The twin's ``os.write`` may block for one SO_SNDTIMEO on a full blocking socket; the
kernel writes with MSG_DONTWAIT.) It returns the answer as
``decode_json_answer`` reads it when exactly one frame arrived, fit in
``EXCHANGE_BUFFER_BYTES``, carries a flat JSON header and no body, is a response and
has the request's opaque (a send's usual answer); otherwise the bytes it has read (at
least the first frame's length prefix, possibly more than one frame), which the caller
hands to its frame reader to carry on; or, on failure, an int: the ``EXCHANGE_*`` kind
in the low byte and the errno above it (0 for the timeouts and a peer close). A write
that timed out or failed may have sent part of the frame: the caller closes the socket.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import select
import threading
import time
from typing import Any

from mqcore.format.properties import format_properties
from mqcore.format.batch import encode_batch_message  # the generic item encoder: the batcher twin's reference

__all__ = ["EXCHANGE_BUFFER_BYTES", "EXCHANGE_PEER_CLOSED", "EXCHANGE_READ_FAILED", "EXCHANGE_READ_TIMEOUT",
           "EXCHANGE_WAIT_SLICE_MS", "EXCHANGE_WRITE_FAILED", "EXCHANGE_WRITE_TIMEOUT", "SendTemplate", "decode_json_answer",
           "encode_request_frame", "exchange", "send_template"]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_HEADER_LENGTH_MASK = 0xFFFFFF
_FLAG_RESPONSE = 1  # remoting.codes.FLAG_RESPONSE (kernels do not import the remoting layer)
_SHORT = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
#: characters both JSON writers escape identically (decimal-digit \\u00XX or a short escape)
_SAME_ESCAPE = re.compile('[\x00-\x09\x0a\x0c\x0d\x10-\x19"\\\\]')
#: characters where the writers differ (hex letters in the escape) or that are not ASCII
_UNHANDLED = re.compile('[\x0b\x0e\x0f\x1a-\x1f\x7f-\U0010ffff]')


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    short = _SHORT.get(ch)
    return short if short is not None else "\\u%04x" % ord(ch)


def _quote(text: str) -> str | None:
    if _UNHANDLED.search(text) is not None:
        return None
    return '"' + _SAME_ESCAPE.sub(_escape, text) + '"'


def _int32(value: Any) -> bool:
    return type(value) is int and _INT32_MIN <= value <= _INT32_MAX


def encode_request_frame(code: int, language: str, version: int, opaque: int, flag: int,
                         keys: tuple[str, ...], values: tuple[Any, ...], body: Any) -> bytes | None:
    """The whole frame (length prefix included) of a JSON request, or None; see the module
    docstring. ``keys`` are distinct; ``values[i]`` belongs to ``keys[i]``."""
    if not (_int32(code) and _int32(version) and _int32(opaque) and _int32(flag)):
        return None
    if flag & _FLAG_RESPONSE:  # a response always carries extFields: not a request's layout
        return None
    if len(keys) != len(values) or type(language) is not str or _quote(language) is None:
        return None
    members = []
    for key, value in zip(keys, values):
        if value is None:
            continue
        if type(key) is not str:
            return None
        if type(value) is str:
            text = value
        elif type(value) is bool:
            text = "true" if value else "false"
        elif type(value) is int:
            text = str(value)
        else:
            return None
        qk, qv = _quote(key), _quote(text)
        if qk is None or qv is None:
            return None
        members.append(qk + ":" + qv)
    ext = ',"extFields":{' + ",".join(members) + "}" if members else ""
    header = ('{"code":%d%s,"flag":%d,"language":"%s","opaque":%d,"serializeTypeCurrentRPC":"JSON",'
              '"version":%d}' % (code, ext, flag, language, opaque, version)).encode("ascii")
    body = memoryview(body).cast("B")
    length = 4 + len(header) + body.nbytes
    if len(header) > _HEADER_LENGTH_MASK or length > _INT32_MAX:
        return None
    return length.to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body.tobytes()


# --- answers ---------------------------------------------------------------------------
_WS = " \t\n\r"
_TOP_INT = ("code", "opaque", "flag", "version")


class _Unusual(Exception):
    """The header is not of the flat shape: the generic decoder takes over."""


class _Reader:
    """A cursor over the header text (ASCII only, checked by the caller)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip_ws(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in _WS:
            pos += 1
        self.pos = pos

    def expect(self, ch: str) -> None:
        self.skip_ws()
        if self.pos >= len(self.text) or self.text[self.pos] != ch:
            raise _Unusual
        self.pos += 1

    def peek(self) -> str:
        self.skip_ws()
        if self.pos >= len(self.text):
            raise _Unusual
        return self.text[self.pos]

    def string(self) -> str:
        """A string without escapes or control characters."""
        self.expect('"')
        end = self.text.find('"', self.pos)
        if end < 0:
            raise _Unusual
        value = self.text[self.pos:end]
        if "\\" in value or any(c < " " for c in value):
            raise _Unusual
        self.pos = end + 1
        return value

    def integer(self) -> int:
        """An int32 written as JSON writes one: optional minus, no leading zeros."""
        self.skip_ws()
        text, start = self.text, self.pos
        pos = start + (1 if start < len(text) and text[start] == "-" else 0)
        digits = pos
        while pos < len(text) and "0" <= text[pos] <= "9":
            pos += 1
        n = pos - digits
        if n == 0 or n > 10 or (n > 1 and text[digits] == "0"):
            raise _Unusual
        if pos < len(text) and text[pos] in ".eE":
            raise _Unusual
        value = int(text[start:pos])
        if not _INT32_MIN <= value <= _INT32_MAX:
            raise _Unusual
        self.pos = pos
        return value


def _members(reader: _Reader):
    """Yield the member names of an object (the caller reads each value), then stop."""
    reader.expect("{")
    if reader.peek() == "}":
        reader.pos += 1
        return
    while True:
        name = reader.string()
        reader.expect(":")
        yield name
        sep = reader.peek()
        reader.pos += 1
        if sep == "}":
            return
        if sep != ",":
            raise _Unusual


def decode_json_answer(header: Any) -> tuple[int, int, int, str | None, dict[str, str]] | None:
    """``(code, opaque, flag, remark, ext)`` of a flat JSON header, or None; see the module docstring.
    ``code`` must be present; opaque and flag default to 0; a member named twice gives None;
    ``language``, ``version`` and ``serializeTypeCurrentRPC`` are checked for shape only."""
    raw = bytes(header)
    if not raw.isascii():
        return None
    reader = _Reader(raw.decode("ascii"))
    seen: set[str] = set()
    ints = {"opaque": 0, "flag": 0}
    remark: str | None = None
    ext: dict[str, str] = {}
    try:
        for name in _members(reader):
            if name in seen:
                raise _Unusual
            seen.add(name)
            if name in _TOP_INT:
                ints[name] = reader.integer()
            elif name == "remark":
                if reader.peek() == "n":
                    raise _Unusual  # null: let the generic decoder read it
                remark = reader.string()
            elif name == "extFields":
                for key in _members(reader):
                    if key in ext:
                        raise _Unusual
                    ext[key] = reader.string()
            elif name in ("language", "serializeTypeCurrentRPC"):
                reader.string()
            else:
                raise _Unusual
        reader.skip_ws()
        if reader.pos != len(reader.text) or "code" not in ints:
            raise _Unusual
    except _Unusual:
        return None
    return ints["code"], ints["opaque"], ints["flag"], remark, ext


# --- one exchange on a socket ------------------------------------------------------------
EXCHANGE_WRITE_TIMEOUT = 1
EXCHANGE_READ_TIMEOUT = 2
EXCHANGE_PEER_CLOSED = 3
EXCHANGE_WRITE_FAILED = 4
EXCHANGE_READ_FAILED = 5
#: the answer bytes ``exchange`` reads itself; a longer answer goes to the caller's frame reader
EXCHANGE_BUFFER_BYTES = 8192
#: the longest a read may wait inside the read itself on a blocking socket: the caller sets the
#: socket's SO_RCVTIMEO (and SO_SNDTIMEO) to at most this; ``exchange`` waits there only while
#: more than this is left, else (and once a read found nothing) in ``poll``, to the deadline
EXCHANGE_WAIT_SLICE_MS = 100


def _wait_ms(deadline: float) -> int:
    """Milliseconds left, rounded up so a wait never spins at 0; -1 when the deadline passed."""
    left = (deadline - time.monotonic()) * 1000.0
    if left <= 0:
        return -1
    whole = int(min(left, 2147483647.0))
    return whole + 1 if whole < left else whole


def exchange(fd: int, frame: Any, opaque: int, deadline: float) -> tuple[int, int, int, str | None, dict[str, str]] | bytes | int:
    """Send ``frame`` on the socket ``fd`` and read the answer; see the module docstring."""
    view = memoryview(frame).cast("B")
    poller = select.poll()
    poller.register(fd, select.POLLOUT | select.POLLERR | select.POLLHUP)
    while view:
        try:
            view = view[os.write(fd, view):]
            continue
        except InterruptedError:
            continue
        except BlockingIOError:
            pass
        except OSError as e:
            return EXCHANGE_WRITE_FAILED | (e.errno or 0) << 8
        wait = _wait_ms(deadline)
        if wait < 0:
            return EXCHANGE_WRITE_TIMEOUT
        try:
            poller.poll(wait)
        except InterruptedError:
            pass
        except OSError as e:
            return EXCHANGE_WRITE_FAILED | (e.errno or 0) << 8
    poller.modify(fd, select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP)
    got = bytearray()
    need = -1
    # on a blocking socket (SO_RCVTIMEO at most a slice) the read waits itself: one system call
    # per answer; near the deadline, and once a read found nothing, poll waits exactly
    readable, wait_in_read = False, True
    while True:
        if not readable:
            wait = _wait_ms(deadline)
            if wait < 0:
                return EXCHANGE_READ_TIMEOUT
            if not wait_in_read or wait <= EXCHANGE_WAIT_SLICE_MS:
                try:
                    readable = bool(poller.poll(wait))
                except InterruptedError:
                    pass
                except OSError as e:
                    return EXCHANGE_READ_FAILED | (e.errno or 0) << 8
                continue
        readable = False
        try:
            chunk = os.read(fd, EXCHANGE_BUFFER_BYTES - len(got))
        except InterruptedError:
            continue
        except BlockingIOError:
            wait_in_read = False  # nothing came (a slice ran out, or a non-blocking socket): poll from now on
            continue
        except OSError as e:
            return EXCHANGE_READ_FAILED | (e.errno or 0) << 8
        if not chunk:
            return EXCHANGE_PEER_CLOSED
        got += chunk
        if need < 0 and len(got) >= 4:
            need = 4 + int.from_bytes(got[:4], "big")
        if need >= 0 and (len(got) >= need or need > EXCHANGE_BUFFER_BYTES):
            break
    if len(got) == need and need >= 8:
        word = int.from_bytes(got[4:8], "big")
        header_len = word & 0xFFFFFF
        if word >> 24 == 0 and 8 + header_len == need and header_len:
            answer = decode_json_answer(got[8:need])
            if answer is not None and answer[2] & _FLAG_RESPONSE and answer[1] == opaque:
                return answer
    return bytes(got)


# --- the blocking send: one call per Producer.send ------------------------------------------
def _int64(value: Any) -> bool:
    return type(value) is int and -(1 << 63) <= value < (1 << 63)


def send_template(code: int, language: str, version: int, producer_group: str, topic: str, default_topic: str,
                  default_topic_queue_nums: int, queue_id: int, broker_name: str, mq: Any, result_type: Any,
                  send_ok: Any, access_key: str | None = None, secret_key: str | None = None) -> SendTemplate | None:
    """The constant parts of the SEND_MESSAGE_V2 frame of one queue (``code``, the header
    fields of ``SendMessageRequestHeader.V2_KEYS`` a plain send to it carries: ``f`` sysFlag
    0, ``j`` 0, ``k``/``m`` false, ``l`` absent), or None when one of them is not written by
    ``encode_request_frame`` (the caller then takes the generic path). ``mq``,
    ``result_type`` and ``send_ok``: the queue, the SendResult class and its SEND_OK status
    that ``SendTemplate.send`` uses for the usual answer (the kernels import no client code).

    ``access_key`` / ``secret_key`` (plain ACL, no security token): every frame carries
    ``AccessKey`` and the ``Signature`` ``SessionCredentials.sign`` would add - HMAC-SHA1 of
    the extFields values in key order (``AccessKey`` sorts first) and the body - for bodies up
    to ``SIGNED_BODY_MAX`` bytes (``frame`` declines longer ones: the generic path signs them)."""
    if not (_int32(code) and _int32(version) and type(default_topic_queue_nums) is int and _int32(queue_id)):
        return None
    quoted = [_quote(t) if type(t) is str else None
              for t in (language, producer_group, topic, default_topic, broker_name)]
    if None in quoted:
        return None
    lang, group, t, dt, broker = (q.encode("ascii") for q in quoted)  # type: ignore[union-attr]
    head = b'{"code":%d,"extFields":{"a":%s,"b":%s,"c":%s,"d":"%d","e":"%d","f":"0","g":"' % (
        code, group, t, dt, default_topic_queue_nums, queue_id)
    after = b'},"flag":0,"language":%s,"opaque":' % lang
    tail = b',"serializeTypeCurrentRPC":"JSON","version":%d}' % version
    if access_key is None:
        return SendTemplate(head, b'","j":"0","k":"false","m":"false","n":%s' % broker + after, tail, mq, queue_id,
                            result_type, send_ok)
    ak = _quote(access_key) if type(access_key) is str else None
    if ak is None or type(secret_key) is not str or not secret_key:
        return None
    prefix = ("%s%s%s%s%d%d0" % (access_key, producer_group, topic, default_topic, default_topic_queue_nums,
                                 queue_id)).encode()
    suffix = ("0falsefalse" + broker_name).encode()
    mid = b'","j":"0","k":"false","m":"false","n":%s,"AccessKey":%s,"Signature":"' % (broker, ak.encode("ascii"))
    return SendTemplate(head, mid, tail, mq, queue_id, result_type, send_ok, b'"' + after, prefix, suffix,
                        secret_key.encode())


#: a signed template signs bodies up to this size (longer ones: the generic path, OpenSSL's SHA-1)
SIGNED_BODY_MAX = 2048


class SendTemplate:
    """One queue's SEND_MESSAGE_V2 frame with the per-message fields left out (``head``
    up to bornTimestamp's value, ``mid`` from the end of the properties to the opaque's
    value, ``tail`` after it): what ``send_template`` builds once per queue, so a send
    writes its frame with a few copies.

    ``frame(opaque, born, flag, properties, body)``: the frame ``encode_request_frame``
    writes for these fields (``properties`` the message's dict, rendered as
    ``messageProperties2String`` renders it: ``name U+0001 value`` pairs joined by U+0002,
    None values left out), byte for byte, or None when it would decline (a non-str
    property, a character it does not handle, a number out of range).

    ``send(fd, opaque, born, flag, properties, body, deadline, uniq_id)``: that frame
    exchanged as ``exchange`` does it, in one call; the usual answer (SUCCESS, its ext
    fields as ``SendMessageResponseHeader.from_ext`` reads them plainly, this queue's id)
    comes back as the SendResult (``result``), any other as ``exchange`` returns it; None,
    with nothing sent, when ``frame`` declines.

    ``result(answer, uniq_id)``: the SendResult of a decoded SUCCESS answer naming this
    queue, None for any other (the caller maps the code, or raises, as before).
    ``read_answer(header, opaque, uniq_id)``: ``send``'s reading of one answer header (the
    compiled kernel reads the usual answer straight into the SendResult, without the ext
    dict, and falls back to ``decode_json_answer`` + ``result`` for anything else)."""

    __slots__ = ("head", "mid", "tail", "mq", "queue_id", "result_type", "send_ok", "mid2", "sign_prefix",
                 "sign_suffix", "signed", "_secret")

    def __init__(self, head: bytes, mid: bytes, tail: bytes, mq: Any, queue_id: int, result_type: Any,
                 send_ok: Any, mid2: bytes = b"", sign_prefix: bytes | None = None, sign_suffix: bytes | None = None,
                 secret: bytes | None = None) -> None:
        self.head, self.mid, self.tail, self.mid2 = head, mid, tail, mid2
        self.mq, self.queue_id, self.result_type, self.send_ok = mq, queue_id, result_type, send_ok
        self.signed = secret is not None
        self.sign_prefix, self.sign_suffix, self._secret = sign_prefix or b"", sign_suffix or b"", secret

    def frame(self, opaque: int, born: int, flag: int, properties: dict[str, str], body: bytes) -> bytes | None:
        if not (_int64(born) and _int64(flag)) or not 0 <= opaque <= _INT32_MAX:
            return None
        for k, v in properties.items():
            if v is not None and (type(k) is not str or type(v) is not str):
                return None
        raw = format_properties(properties)
        props = _quote(raw)
        if props is None:
            return None
        mid = self.mid
        if self.signed:
            if len(body) > SIGNED_BODY_MAX:
                return None
            content = b"%s%d%d%s%s" % (self.sign_prefix, born, flag, raw.encode("ascii"), self.sign_suffix)
            mac = hmac.new(self._secret or b"", content, hashlib.sha1)
            mac.update(body)
            mid = mid + base64.b64encode(mac.digest()) + self.mid2
        header = b"%s%d\",\"h\":\"%d\",\"i\":%s%s%d%s" % (self.head, born, flag, props[:-1].encode("ascii"),
                                                            mid, opaque, self.tail)
        length = 4 + len(header) + len(body)
        if len(header) > _HEADER_LENGTH_MASK or length > _INT32_MAX:
            return None
        return length.to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + bytes(body)

    def send(self, fd: int, opaque: int, born: int, flag: int, properties: dict[str, str], body: bytes,
             deadline: float, uniq_id: str) -> Any:
        frame = self.frame(opaque, born, flag, properties, body)
        if frame is None:
            return None
        answer = exchange(fd, frame, opaque, deadline)
        if type(answer) is not tuple:
            return answer
        result = self.result(answer, uniq_id)
        return answer if result is None else result

    def read_answer(self, header: Any, opaque: int, uniq_id: str) -> Any:
        """What ``send`` makes of an answer whose JSON header (no body) is ``header``: the
        SendResult, the decoded answer when it is not the usual one, None when it is not
        a flat response to ``opaque`` (``send`` then returns the bytes)."""
        answer = decode_json_answer(header) if len(header) else None
        if answer is None or not (answer[2] & _FLAG_RESPONSE and answer[1] == opaque):
            return None
        result = self.result(answer, uniq_id)
        return answer if result is None else result

    def result(self, answer: tuple[int, int, int, str | None, dict[str, str]], uniq_id: str) -> Any:
        if answer[0] != 0:
            return None
        ext = answer[4]
        msg_id = ext.get("msgId")
        if type(msg_id) is not str or _plain_int(ext.get("queueId"), 9) != self.queue_id:
            return None
        offset = _plain_int(ext.get("queueOffset"), 18)
        if offset < 0:
            return None
        transaction_id, region, trace = ext.get("transactionId"), ext.get("MSG_REGION"), ext.get("TRACE_ON")
        if trace is None or trace == "true":
            trace_on = True
        elif trace == "false":
            trace_on = False
        else:
            return None
        if (transaction_id is not None and type(transaction_id) is not str) or (
                region is not None and type(region) is not str):
            return None
        return self.result_type(self.send_ok, uniq_id, self.mq, offset, msg_id, transaction_id,
                                "DefaultRegion" if region is None else region, trace_on)


def _plain_int(text: Any, max_digits: int) -> int:
    """What ``headers._plain_int`` reads (1..max_digits ASCII digits), -1 for anything else."""
    if type(text) is not str or not (0 < len(text) <= max_digits) or not (text.isascii() and text.isdigit()):
        return -1
    return int(text)
# --- auto-batching: a send_async's per-message work in one call -----------------------------------
__all__ += ["ConsumeRun", "DrainerState", "ListenerRunner", "RUN_EXHAUSTED", "RUN_OUTCOME", "RUN_SETTLE",
            "RUN_SLOW", "RUN_STOPPED"]
__all__ += ["AutoBatcher", "BATCH_ARM_TIMER", "BATCH_LAUNCH", "BATCH_LEAVE_SOON", "JOIN_CHECK", "JOIN_WAIT",
            "PendingBatch", "UniqIdWriter", "WindowSlots", "gc_track"]
#: ``AutoBatcher.add`` answers besides a future and None
JOIN_CHECK = 1  # the topic was not checked yet (or the body is empty or too large): check, then add(checked=True)
JOIN_WAIT = 2  # window_slot=1 and the window is full: wait for a slot, then add(window_slot=2)
#: ``on_batch(action, batch)``: what the producer's loop is asked to do with a batch
BATCH_LAUNCH = 1  # full: send it now
BATCH_LEAVE_SOON = 2  # new, and the key's pipeline has room: send it on the loop's next turn
BATCH_ARM_TIMER = 3  # new, the pipeline is full: it leaves on an earlier batch's answer or the delay bound
_ITEM_OVERHEAD = 22  # TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLENGTH (int32 each) + PROPERTIESLENGTH (int16)
_MAX_PROPERTIES = 32767
#: the smallest buffer a batch reserves (a batch of a few small messages)
_MIN_RESERVE = 4096
#: answered batches' buffers a batcher keeps for the next batches (each at most batch_max_bytes)
_MAX_SPARES = 2


def _unexported(buf: bytearray) -> bool:
    """No view of ``buf`` is alive (a bytearray with one refuses to change size)."""
    try:
        buf.append(0)
    except BufferError:
        return False
    del buf[-1]
    return True


def _props_len(props: dict[Any, Any]) -> int:
    """Bytes of ``messageProperties2String(props)`` (None values left out); -2 when a name or
    value is not a str (declined: the general path formats it)."""
    n = count = 0
    for k, v in props.items():
        if v is None:
            continue
        if type(k) is not str or type(v) is not str:
            return -2
        n += len(k.encode("utf-8")) + 1 + len(v.encode("utf-8"))
        count += 1
    return n + count - 1 if count else 0


class UniqIdWriter:
    """``ids.next_id()`` (a ``UniqIdGenerator``), which the compiled kernel writes in C, sharing
    the generator's counter and month base (``system_clock``: the generator reads the system
    clock, which the compiled kernel then reads itself). ``stamp_all(msgs)``: every message's
    ``UNIQ_KEY`` in order, a message without one stamped with a new one (an explicit batch)."""

    def __init__(self, ids: Any, system_clock: bool) -> None:
        self._ids = ids

    def next_id(self) -> str:
        return self._ids.next_id()  # type: ignore[no-any-return]

    def stamp_all(self, msgs: Any) -> list[str]:
        out = []
        for msg in msgs:
            props = msg._properties
            uniq = props.get("UNIQ_KEY")
            if not uniq:
                uniq = props["UNIQ_KEY"] = self._ids.next_id()
            out.append(uniq)
        return out


class PendingBatch:
    """One batch of an aggregation key (topic, queue, tags, wait-store-ok).

    Filled on the callers' threads by :meth:`AutoBatcher.add` (under the batcher's lock):
    ``body`` is a view of the SEND_BATCH body so far (every message's item encoded straight
    into it; the loop hands the view to the transport, no copy), held in a buffer that is
    reserved once (``capacity``: the size the previous batch reached, or doubling, up to
    ``batch_max_bytes``) and replaced, never resized, when it must grow, so a view of it
    (the transport's) stays valid;
    ``uniq_ids`` its messages' UNIQ_KEYs in order. ``open`` is True while it is in the
    pending table (messages may join). The loop then sends it (``timer``, ``launched``,
    ``window_slots`` are the producer's bookkeeping).

    It is also the shared state of its messages' futures (``mqcore.client.loop.BatchFuture``):
    settling a batch is one write here (``state``, ``result`` or ``error``) under
    ``condition``, not one per message; ``result_for(i)`` makes message ``i``'s own
    ``SendResult`` when someone asks for it. ``watchers`` lists the futures that need a
    word of their own when the batch settles (a waiter of ``concurrent.futures.wait`` or a
    done callback); ``externals`` the ``(index, future)`` pairs of futures the caller made.
    """

    def __init__(self, key: Any, topic: str, queue: Any, tags: str | None, wait: bool, condition: Any,
                 result_type: Any) -> None:
        self.key = key
        self.topic = topic
        self.queue = queue
        self.tags = tags
        self.wait = wait
        self._buf = bytearray()
        self._used = 0
        self._spares: list[bytearray] | None = None  # its batcher's spare buffers (None: made on its own)
        self.uniq_ids: list[str] = []
        self.open = True
        self.timer: Any = None
        self.launched = False
        self.window_slots = 0
        self.externals: list[tuple[int, Any]] | None = None
        self.condition = condition
        self.state = "PENDING"
        self.result: Any = None
        self.error: BaseException | None = None
        self.watchers: list[Any] | None = None
        self._result_type = result_type
        self._offset_ids: list[str] | None = None
        self._made: list[Any] | None = None

    @property
    def count(self) -> int:
        return len(self.uniq_ids)

    @property
    def size(self) -> int:
        return self._used

    @property
    def body(self) -> memoryview:
        return memoryview(self._buf)[:self._used]

    @property
    def capacity(self) -> int:
        return len(self._buf)

    def drop_body(self) -> None:
        """The batch was answered: its futures (which keep it alive as long as the caller keeps
        them) need only the ids and the answer, not the encoded messages. Its buffer becomes
        one of the batcher's ``spares`` (at most two) unless a view of it is still alive (the
        transport's, an error's traceback...): reusing it then could change bytes someone may
        still read."""
        buf, spares = self._buf, self._spares
        self._buf = bytearray()
        self._used = 0
        if spares is not None and buf and len(spares) < _MAX_SPARES and _unexported(buf):
            spares.append(buf)

    def _append(self, item: bytes, hint: int, limit: int) -> None:
        """Append an encoded item. A new buffer is a spare of the batcher large enough (the
        last such one), else one reserved at ``hint`` (what the last batch reached), else
        doubling, up to ``limit``; growing takes a new buffer (see the class)."""
        need = self._used + len(item)
        if need > len(self._buf):
            bigger = None
            spares = self._spares
            for i in range(len(spares) - 1 if spares else -1, -1, -1):
                if len(spares[i]) >= need:  # type: ignore[index]
                    bigger = spares.pop(i)  # type: ignore[union-attr]
                    break
            if bigger is None:
                bigger = bytearray(max(need, min(limit, max(hint, 2 * len(self._buf), _MIN_RESERVE))))
            bigger[:self._used] = memoryview(self._buf)[:self._used]
            self._buf = bigger
        self._buf[self._used:need] = item
        self._used = need

    def track(self, future: Any) -> None:
        """The compiled batch has the cyclic collector track an untracked future of its own
        again (see ``gc_track``); the twin never untracks one."""

    def settled_result(self, index: int) -> Any:
        """Message ``index``'s ``SendResult`` once the batch is settled with a result (None
        before, or when it failed or was cancelled), made on first use and then the same object
        for every caller: a ``BatchFuture``'s ``result()`` in one call."""
        if self.error is not None or self.state != "FINISHED":
            return None
        made = self._made
        if made is None:
            made = self._made = [None] * len(self.uniq_ids)
        one = made[index]
        if one is None:
            one = made[index] = self.result_for(index)
        return one

    def result_for(self, index: int) -> Any:
        r = self.result
        ids = self._offset_ids
        if ids is None:
            ids = list(r.offset_msg_ids)
            if len(ids) < len(self.uniq_ids):  # a broker that listed fewer ids: the rest get the batch's
                ids.extend([r.offset_msg_id] * (len(self.uniq_ids) - len(ids)))
            self._offset_ids = ids
        return self._result_type(r.status, self.uniq_ids[index], r.message_queue, r.queue_offset + index,
                                 ids[index], r.transaction_id, r.region_id, r.trace_on)


class WindowSlots:
    """The async-send window of a producer (``max_async_inflight``): a counting semaphore with
    ``threading.Semaphore``'s ``acquire(blocking, timeout)`` and ``release()``, plus
    ``release_many(n)`` (a batch's messages answered together: one lock round) and ``free``.

    Why: the window is taken once per ``send_async``. The compiled one takes and gives a slot
    without a lock round (the GIL orders its count) and ``AutoBatcher.add`` takes it in C;
    this twin is one C-level lock round (``threading.Semaphore`` goes through a pure-Python
    ``Condition``). Waiters are counted so a release wakes someone only when someone waits.
    """

    __slots__ = ("_free", "_lock", "_freed", "_waiting")

    def __init__(self, count: int) -> None:
        if count < 0:
            raise ValueError("WindowSlots count must be >= 0")
        self._free = count
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._waiting = 0

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        with self._lock:
            if self._free > 0:
                self._free -= 1
                return True
            if not blocking:
                return False
            deadline = None if timeout is None else time.monotonic() + timeout
            self._waiting += 1
            try:
                while self._free <= 0:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._freed.wait(remaining)
            finally:
                self._waiting -= 1
            self._free -= 1
            return True

    def release(self) -> None:
        self.release_many(1)

    def release_many(self, count: int) -> None:
        if count <= 0:
            return
        with self._lock:
            self._free += count
            if self._waiting:
                self._freed.notify(count)

    @property
    def free(self) -> int:
        return self._free


class AutoBatcher:
    """The pending batches of one auto-batching producer, and ``add``: everything a
    ``send_async`` does for a message on the caller's thread, in one call.

    Why: done as separate Python steps (stamp, encode, take a window slot, find the
    batch, append, make a ``concurrent.futures.Future``) this was ~3 µs per message, more
    than the whole batch costs the broker.

    ``add(msg, queue, future, window_slot, checked)``:

    * declines (None: the caller sends it unbatched) a message that is not a plain one
      (topic not a str, body not bytes, properties not a dict of str), delayed,
      transactional, on a retry topic, whose properties encode to more than 32767 bytes,
      whose item would fill ``batch_max_bytes`` on its own, or that arrives while the
      batcher is ``closed`` or the pending batches hold ``total_batch_max_bytes``;
    * gives ``JOIN_CHECK`` (nothing done) unless ``checked`` or the topic is in
      ``checked_topics`` and the body is non-empty and at most ``max_message_bytes``;
    * stamps the message's ``UNIQ_KEY`` when it has none (``ids.next_id()``, the same id
      string; ``system_clock``: the generator's clock is the system clock, read here);
    * ``window_slot=1`` takes a slot of ``window`` without blocking (``JOIN_WAIT``, nothing
      taken, when it is full); ``2``: the caller holds one for this message. Either way the
      batch gives it back when it is answered (``window_slots``); a decline gives back a
      slot ``add`` took itself, never the caller's;
    * appends the message's SEND_BATCH item (``encode_batch_message``'s bytes) to the
      pending batch of its key, opening a new batch when there is none or this message
      would overfill it (the full one leaves: ``on_batch(BATCH_LAUNCH, full)``), and
      detaches a batch that reached ``batch_max_bytes``;
    * returns ``future`` if given (recorded in ``externals``, settled by the caller), else a
      new ``future_type`` (``BatchFuture``) bound to the batch and the message's index.

    A new batch is announced with ``on_batch(BATCH_LEAVE_SOON or BATCH_ARM_TIMER, batch)``
    once per batch, after the lock is released. ``lock`` guards ``pending``,
    ``inflight_per_key``, ``held_bytes`` and ``closed``; the loop side takes it too.
    """

    def __init__(self, *, lock: Any, batch_max_bytes: int, total_batch_max_bytes: int, max_inflight_batches: int,
                 max_message_bytes: int, checked_topics: Any, ids: Any, system_clock: bool, future_type: Any,
                 condition: Any, result_type: Any, on_batch: Any, window: Any = None) -> None:
        self.lock = lock
        self.pending: dict[Any, PendingBatch] = {}
        self.inflight_per_key: dict[Any, int] = {}
        self.held_bytes = 0
        self.closed = False
        self.batch_max_bytes = batch_max_bytes
        self.total_batch_max_bytes = total_batch_max_bytes
        self.max_inflight_batches = max_inflight_batches
        self.max_message_bytes = max_message_bytes
        self._checked_topics = checked_topics
        self._ids = ids
        self.condition = condition
        self._future_type = future_type
        self._result_type = result_type
        self._on_batch = on_batch
        self._window = window
        #: the size the last batch to leave reached: what a new batch reserves
        self.recent_batch_bytes = 0
        #: buffers of answered batches, for the next ones (``PendingBatch.drop_body``)
        self.spares: list[bytearray] = []

    def add(self, msg: Any, queue: Any = None, future: Any = None, window_slot: int = 0,
            checked: bool = False) -> Any:
        topic, body, props = msg.topic, msg.body, msg._properties
        if type(topic) is not str or type(body) is not bytes or type(props) is not dict:
            return None
        if props.get("DELAY") or props.get("TRAN_MSG") or topic.startswith("%RETRY%"):
            return None
        if not checked and (not body or len(body) > self.max_message_bytes or topic not in self._checked_topics):
            return JOIN_CHECK
        if not props.get("UNIQ_KEY"):
            props["UNIQ_KEY"] = self._ids.next_id()
        plen = _props_len(props)
        if plen < 0 or plen > _MAX_PROPERTIES:
            return None
        size = _ITEM_OVERHEAD + len(body) + plen
        if size >= self.batch_max_bytes:
            return None
        tags = props.get("TAGS")
        wait = props.get("WAIT") != "false"
        if window_slot == 1 and not self._window.acquire(False):
            return JOIN_WAIT
        full = fresh = None
        room = False
        with self.lock:
            if self.closed or self.held_bytes + size > self.total_batch_max_bytes:
                batch = None
            else:
                key = (topic, queue, tags, wait)
                batch = self.pending.get(key)
                if batch is None:
                    batch = fresh = self.pending[key] = PendingBatch(key, topic, queue, tags, wait, self.condition,
                                                                     self._result_type)
                    fresh._spares = self.spares
                if batch is not fresh and batch.size + size > self.batch_max_bytes:
                    full = self.detach(batch)  # leaves now; this message starts the next one
                    batch = fresh = self.pending[key] = PendingBatch(key, topic, queue, tags, wait, self.condition,
                                                                     self._result_type)
                    fresh._spares = self.spares
                item = encode_batch_message(msg.flag, body, props)
                if len(item) != size:
                    if batch is fresh:  # announced to nobody yet: it must not stay pending
                        del self.pending[key]
                        batch.open = False
                    raise RuntimeError("a message's properties changed while it was being batched")
                batch._append(item, self.recent_batch_bytes, self.batch_max_bytes)
                index = len(batch.uniq_ids)
                batch.uniq_ids.append(props["UNIQ_KEY"])
                if window_slot:
                    batch.window_slots += 1
                self.held_bytes += size
                if future is not None:
                    if batch.externals is None:
                        batch.externals = []
                    batch.externals.append((index, future))
                if batch.size >= self.batch_max_bytes:
                    full = self.detach(batch)
                    fresh = None
                if fresh is not None:
                    room = self.inflight_per_key.get(fresh.key, 0) < self.max_inflight_batches
        if batch is None:  # declined: closed, or over the memory budget
            if window_slot == 1:
                self._window.release()
            return None
        if future is None:
            future = self._future_type.__new__(self._future_type)
            future._cell = batch
            future._index = index
        if full is not None:
            self._on_batch(BATCH_LAUNCH, full)
        if fresh is not None:
            self._on_batch(BATCH_LEAVE_SOON if room else BATCH_ARM_TIMER, fresh)
        return future

    def detach(self, batch: PendingBatch) -> PendingBatch:
        """Take ``batch`` out of the pending table and count it in flight (the lock held)."""
        if self.pending.get(batch.key) is batch:
            del self.pending[batch.key]
        batch.open = False
        self.recent_batch_bytes = batch.size
        self.inflight_per_key[batch.key] = self.inflight_per_key.get(batch.key, 0) + 1
        return batch


def gc_track(obj: Any) -> None:
    """The compiled kernel has the cyclic collector track again a future it untracked; the
    twin never untracks anything."""


# --- concurrent consumption: a run of listener calls in one step -------------------------------
# (the compiled twin: ``mqcore/_consume_run.pxi``, included by ``mqcore/_wire_client.pyx``)
#
# A push consumer hands the messages of one pull answer to its consume threads as one
# ``ConsumeRun``; each thread's ``DrainerState`` and the service's ``ListenerRunner`` then
# call the listener once per listener batch (``batch_size`` messages, RocketMQ's default 1:
# ``listener([msg], context)``) until the run is used up, with no Python-level loop, lock or
# allocation per message on the fast path. Several threads may take batches from the same run
# (a thread started because a listener call was slow takes the next ones): ``claim`` is atomic.
#
# ``ListenerRunner.run(run, state)`` per batch, in this order: the batch is claimed (none
# left, or the process queue dropped: ``RUN_EXHAUSTED``); messages still on the group's retry
# topic get their original topic back (``reset_retry(batch)``, for the whole batch as soon as
# one is); each message is stamped ``stamp_key`` (``CONSUME_START_TIME``: the clock's ms, the pair
# ``stamp_prefix + ms`` appended after ``property_separator`` while the properties are unparsed); ``state.began`` is set (perf-counter seconds, 0.0 again
# after the call: the consumer's watchdog reads it); the listener is called with a list of
# the batch and a fresh ``context_type(mq)``; then
#   * it returned None or ``success`` with ``context.ack_index`` covering the batch, and the
#     queue was not dropped meanwhile: the batch goes to ``state.done`` (``consumed_ok``
#     counts it);
#   * anything else (another status, an exception, a dropped queue, an ack_index inside the
#     batch): ``state.outcome = (batch, status, context, exception)`` and ``RUN_OUTCOME``:
#     the caller decides (send back, retry locally, log) exactly as for a single call.
# It returns ``RUN_SETTLE`` once ``state.done`` holds ``settle_every`` messages, ``RUN_SLOW``
# after a call slower than ``slow_s`` when the run has batches left (the caller may start
# another thread), ``RUN_STOPPED`` when ``stopped`` was set. A list or a context the listener
# did not keep (nothing but the runner refers to it after the call) may be used again for the
# next call (the compiled kernel does; nobody can tell).
# ``DrainerState.take_done()`` swaps ``done`` out atomically with its queue, so the watchdog
# can settle what a thread stuck in a slow call consumed before it.

RUN_EXHAUSTED = 0
RUN_SETTLE = 1
RUN_SLOW = 2
RUN_OUTCOME = 3
RUN_STOPPED = 4


class ConsumeRun:
    """Messages of one queue, consumed in order of ``pos`` by any number of threads."""

    __slots__ = ("msgs", "pos", "pq", "mq", "_lock")

    def __init__(self, msgs: list, pq: Any, mq: Any) -> None:
        import threading
        self.msgs = msgs
        self.pos = 0
        self.pq = pq
        self.mq = mq
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        return max(0, len(self.msgs) - self.pos)

    def claim(self, n: int) -> list | None:
        """The next ``n`` (or fewer) messages, or None when none is left."""
        with self._lock:
            i = self.pos
            if i >= len(self.msgs):
                return None
            self.pos = i + n
            return self.msgs[i:i + n]

    def close(self) -> None:
        """No more batches from this run (its queue was dropped)."""
        with self._lock:
            self.pos = len(self.msgs)


class DrainerState:
    """One consume thread's messages consumed and not yet settled, and its running call."""

    __slots__ = ("done", "pq", "mq", "began", "outcome", "_lock")

    def __init__(self) -> None:
        import threading
        self.done: list = []
        self.pq: Any = None
        self.mq: Any = None
        self.began = 0.0
        self.outcome: tuple | None = None
        self._lock = threading.Lock()

    def take_done(self) -> tuple[list, Any, Any]:
        with self._lock:
            done, self.done = self.done, []
            return done, self.pq, self.mq

    def set_queue(self, pq: Any, mq: Any) -> None:
        """The queue of the messages added to ``done`` from now on (``done`` is empty)."""
        with self._lock:
            self.pq, self.mq = pq, mq

    def add_done(self, msgs: list) -> None:
        with self._lock:
            self.done.extend(msgs)


class ListenerRunner:
    """A concurrent listener's calls over runs (see above)."""

    def __init__(self, listener: Any, context_type: Any, success: Any, batch_size: int, retry_topic: str,
                 reset_retry: Any, clock: Any, system_clock: bool, stamp_key: str, stamp_prefix: bytes,
                 property_separator: bytes, slow_s: float, settle_every: int) -> None:
        self.listener = listener
        self.context_type = context_type
        self.success = success
        self.batch_size = max(1, batch_size)
        self.retry_topic = retry_topic
        self.reset_retry = reset_retry
        self.clock = clock
        self.system_clock = system_clock  # the compiled kernel reads the wall clock itself
        self.stamp_key = stamp_key
        self.stamp_prefix = stamp_prefix  # the encoded name and the name/value separator
        self.property_separator = property_separator
        self.slow_s = slow_s
        self.settle_every = settle_every
        self.stopped = False
        self.consumed_ok = 0
        self._stamp: tuple[int, str, bytes, bytes] = (-1, "", b"", b"")

    def _stamp_for(self, ms: int) -> tuple[int, str, bytes, bytes]:
        stamp = self._stamp
        if stamp[0] != ms:
            pair = self.stamp_prefix + str(ms).encode()
            stamp = self._stamp = (ms, str(ms), pair, self.property_separator + pair)
        return stamp

    def run(self, run: ConsumeRun, state: DrainerState) -> int:
        pq, mq, retry = run.pq, run.mq, self.retry_topic
        while True:
            if self.stopped:
                return RUN_STOPPED
            if pq.dropped:
                run.close()
                return RUN_EXHAUSTED
            batch = run.claim(self.batch_size)
            if batch is None:
                return RUN_EXHAUSTED
            for msg in batch:
                if msg.topic == retry:
                    self.reset_retry(batch)
                    break
            _, now, pair, joined = self._stamp_for(self.clock())
            for msg in batch:
                props = msg._properties
                if props is None:
                    raw = msg._props_raw
                    msg._props_raw = raw + joined if raw else pair
                else:
                    props[self.stamp_key] = now
            context = self.context_type(mq)
            state.began = began = time.perf_counter()
            exc = None
            try:
                status = self.listener(list(batch), context)
            except Exception as e:  # the caller logs it and retries the batch
                status, exc = None, e
            ended = time.perf_counter()
            state.began = 0.0
            if (exc is None and (status is None or status is self.success)
                    and context.ack_index >= len(batch) - 1 and not pq.dropped):
                self.consumed_ok += len(batch)
                state.add_done(batch)
                if len(state.done) >= self.settle_every:
                    return RUN_SETTLE
                if ended - began > self.slow_s and run.remaining:
                    return RUN_SLOW
                continue
            state.outcome = (batch, status, context, exc)
            return RUN_OUTCOME
