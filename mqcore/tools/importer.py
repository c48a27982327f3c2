"""``mqstore import``: append messages given as JSON lines to a store, through ``MessageStore``.

Unlike the read-only subcommands this one writes, so it takes the store lock (a running
broker makes it fail with a clear message) and goes through the real put path: delayed
messages are rewritten, consume queues and the index are built, the checkpoint is kept.
Topics that receive messages are registered in ``config/topics.json`` so a broker
started on the store serves them.

One line, one message::

    {"topic": "T", "queue_id": 1, "tags": "a", "keys": ["k1", "k2"],
     "properties": {"p": "v"}, "body": "text" | "body_base64": "...", "delay_level": 3, "flag": 0}

A bad line is reported (with its line number) and skipped; the import goes on.
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import ipaddress
import dataclasses
import json
import os
import stat
from collections.abc import Iterable, Iterator
from typing import IO, Any

from mqcore.broker.metadata import TopicConfig, TopicConfigTable
from mqcore.clock import system_clock_ms
from mqcore.config import StoreConfig
from mqcore.errors import IllegalArgumentError
from mqcore.format import layout as L
from mqcore.format.properties import has_separator
from mqcore.format.files import ReadOnlyFile, StoreFiles, index_geometry, numbered_files
from mqcore.message import (
    MessageExtBrokerInner,
    Prop,
    pack_host,
    properties_to_bytes,
    unpack_host,
    validate_topic,
)
from mqcore.netaddr import parse_host_port
from mqcore.uniq_id import UniqIdGenerator
from mqcore.store.message_store import MessageStore

DEFAULT_QUEUES = 4
BATCH_MAX_MESSAGES = 256
BATCH_MAX_BYTES = 1 << 20
#: ``mqstore import --help``: the input format, for someone who has only the command
JSONL_FORMAT = """\
input: one JSON object per line (blank lines are skipped), one message each:

  {"topic": "Orders", "body": "text"}
  {"topic": "Orders", "queue_id": 1, "tags": "created", "keys": ["order-1", "c-9"], "properties": {"source": "import"}, "body_base64": "AAEC", "flag": 7}
  {"topic": "Orders", "body": "later", "delay_level": 3}

  topic        required; a RocketMQ topic name
  body         the body as UTF-8 text        } exactly one of the two
  body_base64  the body as base64 bytes      }
  queue_id     optional; default: round robin over the topic's write queues
               (4 for a topic the store does not know yet)
  tags         optional string (the TAGS property)
  keys         optional string or list of strings (the KEYS property, space-joined)
  properties   optional object of string -> string user properties
  delay_level  optional; 1-18 stores the message for delayed delivery (0 = none)
  flag         optional 32-bit integer (the message flag)

Any other field is refused. A bad line is reported with its line number and skipped;
the rest is imported (exit status 1 if any line failed).
"""

_FIELDS = {"topic", "queue_id", "tags", "keys", "properties", "body", "body_base64", "delay_level", "flag"}


@dataclasses.dataclass
class StoreSizes:
    """File sizes for a new store (an existing store's sizes are read from its files)."""

    commitlog_file_size_bytes: int | None = None
    consume_queue_file_size_bytes: int | None = None
    index_slots: int | None = None
    index_entries: int | None = None


def store_config(path: str, sizes: StoreSizes) -> StoreConfig:
    """A ``StoreConfig`` matching the files already in ``path`` (flags must agree with them)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise IllegalArgumentError(f"{path} exists and is not a directory")
    if os.path.isdir(path) and os.listdir(path):
        StoreFiles(path)  # raises "not a store directory" for a directory holding something else
    found = _sizes_on_disk(path, sizes)
    kw: dict[str, Any] = {"store_path": path}
    for name in ("commitlog_file_size_bytes", "consume_queue_file_size_bytes", "index_slots", "index_entries"):
        given, on_disk = getattr(sizes, name), getattr(found, name)
        if given is not None and on_disk is not None and given != on_disk:
            raise IllegalArgumentError(f"--{name.replace('_', '-').replace('-bytes', '')} {given} does not match "
                                       f"the store's files ({on_disk})")
        value = on_disk if on_disk is not None else given
        if value is not None:
            kw[name] = value
    return StoreConfig(**kw)


def _sizes_on_disk(path: str, hint: StoreSizes) -> StoreSizes:
    cfg = StoreConfig(store_path=path)
    found = StoreSizes()
    files = numbered_files(cfg.commitlog_dir)
    if files:
        found.commitlog_file_size_bytes = os.path.getsize(files[0])
    if os.path.isdir(cfg.consume_queue_dir):
        store = StoreFiles(path)
        for topic, qid, _ in store.consume_queues():
            paths = store.cq_paths(topic, qid)
            if paths:
                found.consume_queue_file_size_bytes = os.path.getsize(paths[0])
                break
    if os.path.isdir(cfg.index_dir):
        indexes = StoreFiles(path).index_paths()
        if indexes:
            with ReadOnlyFile(indexes[-1]) as f:
                found.index_slots, found.index_entries = index_geometry(f, hint.index_slots, hint.index_entries)
    return found


@dataclasses.dataclass
class Parsed:
    line_no: int
    topic: str
    queue_id: int | None
    body: bytes
    properties: dict[str, str]
    flag: int


def parse_line(line_no: int, text: str) -> Parsed:
    """One JSON line -> a message; ``IllegalArgumentError`` says what is wrong with it."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise IllegalArgumentError(f"not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise IllegalArgumentError("a line must be a JSON object")
    unknown = sorted(set(obj) - _FIELDS)
    if unknown:
        raise IllegalArgumentError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_FIELDS))}")
    topic = obj.get("topic")
    if not isinstance(topic, str):
        raise IllegalArgumentError("'topic' (a string) is required")
    validate_topic(topic)
    props = _properties(obj.get("properties", {}))
    if "tags" in obj:
        props[Prop.TAGS] = _string(obj["tags"], "tags")
    if "keys" in obj:
        props[Prop.KEYS] = _keys(obj["keys"])
    level = obj.get("delay_level")
    if level is not None:
        if not isinstance(level, int) or isinstance(level, bool) or level < 0:
            raise IllegalArgumentError("'delay_level' must be a non-negative integer")
        if level:
            props[Prop.DELAY] = str(level)
    return Parsed(line_no, topic, _queue_id(obj.get("queue_id")), _body(obj), props, _int(obj.get("flag", 0), "flag"))


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise IllegalArgumentError(f"'{what}' must be a string")
    return value


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not -(1 << 31) <= value < (1 << 31):
        raise IllegalArgumentError(f"'{what}' must be a 32-bit integer")
    return value


def _queue_id(value: Any) -> int | None:
    if value is None:
        return None
    qid = _int(value, "queue_id")
    if qid < 0:
        raise IllegalArgumentError("'queue_id' must not be negative")
    return qid


def _keys(value: Any) -> str:
    keys = [value] if isinstance(value, str) else value
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise IllegalArgumentError("'keys' must be a string or a list of strings")
    if isinstance(value, list) and any(" " in k or not k for k in keys):
        raise IllegalArgumentError("each of 'keys' must be non-empty and without spaces (space separates keys)")
    return " ".join(keys)


def _properties(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise IllegalArgumentError("'properties' must be an object")
    out = {}
    for k, v in value.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (int, float)):
            v = str(v)
        if not isinstance(v, str) or not k:
            raise IllegalArgumentError(f"property {k!r} must have a non-empty name and a string value")
        if has_separator(k + v):
            raise IllegalArgumentError(f"property {k!r} contains U+0001/U+0002, the properties separators")
        out[k] = v
    return out


def _body(obj: dict[str, Any]) -> bytes:
    if ("body" in obj) == ("body_base64" in obj):
        raise IllegalArgumentError("exactly one of 'body' (text) and 'body_base64' is required")
    if "body" in obj:
        return _string(obj["body"], "body").encode("utf-8")
    try:
        return base64.b64decode(_string(obj["body_base64"], "body_base64"), validate=True)
    except binascii.Error as e:
        raise IllegalArgumentError(f"'body_base64' is not base64: {e}") from e


@dataclasses.dataclass
class ImportResult:
    imported: int = 0
    failed: int = 0
    calls: int = 0
    #: topic -> highest queue id written
    topics: dict[str, int] = dataclasses.field(default_factory=dict)


class Importer:
    """Feeds parsed lines to the store, singly or as batches of one topic/queue."""

    def __init__(self, store: MessageStore, topics: TopicConfigTable, err: IO[str], *, batch: bool,
                 store_host: bytes, born_host: bytes):
        self.store = store
        self.topics = topics
        self.err = err
        self.batch = batch
        self.store_host = store_host
        self.born_host = born_host
        self.uniq = UniqIdGenerator(str(ipaddress.ip_address(unpack_host_ip(store_host))))
        self.result = ImportResult()
        self._rr: dict[str, int] = {}
        self._run: list[Parsed] = []
        self._run_bytes = 0

    def feed(self, lines: Iterable[str]) -> ImportResult:
        for line_no, text in enumerate(lines, 1):
            if not text.strip():
                continue
            try:
                p = parse_line(line_no, text)
            except IllegalArgumentError as e:
                self._fail(line_no, str(e))
                continue
            if p.queue_id is None:
                p.queue_id = self._round_robin(p.topic)
            p.properties.setdefault(Prop.UNIQ_KEY, self.uniq.next_id())
            if self.batch and Prop.DELAY not in p.properties:
                self._add_to_run(p)
            else:
                self._flush_run()
                self._put_one(p)
        self._flush_run()
        return self.result

    def _round_robin(self, topic: str) -> int:
        tc = self.topics.get(topic)
        n = tc.write_queue_nums if tc is not None and tc.write_queue_nums > 0 else DEFAULT_QUEUES
        i = self._rr.get(topic, 0)
        self._rr[topic] = i + 1
        return i % n

    def _put_one(self, p: Parsed) -> None:
        now = system_clock_ms()
        r = self.store.put_message(MessageExtBrokerInner(
            topic=p.topic, body=p.body, queue_id=p.queue_id or 0, flag=p.flag, properties=p.properties,
            born_timestamp=now, born_host=self.born_host, store_host=self.store_host))
        self.result.calls += 1
        if r.status.stored:
            self._stored(p.topic, p.queue_id or 0, 1)
        else:
            self._fail(p.line_no, f"{r.status.value}: {r.remark}")

    def _add_to_run(self, p: Parsed) -> None:
        props_len = len(properties_to_bytes(p.properties))
        if props_len > L.MAX_PROPERTIES_BYTES or len(p.body) > self.store.config.max_message_size_bytes:
            self._flush_run()
            self._put_one(p)  # gets the store's own refusal message for this one line
            return
        if self._run and ((self._run[0].topic, self._run[0].queue_id) != (p.topic, p.queue_id)
                          or len(self._run) >= BATCH_MAX_MESSAGES
                          or self._run_bytes + len(p.body) > BATCH_MAX_BYTES):
            self._flush_run()
        self._run.append(p)
        self._run_bytes += len(p.body) + props_len

    def _flush_run(self) -> None:
        run, self._run, self._run_bytes = self._run, [], 0
        if not run:
            return
        items = self.store.k.encode_batch_items([(p.flag, p.body, properties_to_bytes(p.properties)) for p in run])
        topic, qid = run[0].topic, run[0].queue_id or 0
        r = self.store.put_batch(topic, qid, items, born_timestamp=system_clock_ms(), born_host=self.born_host,
                                 store_host=self.store_host)
        self.result.calls += 1
        if r.status.stored:
            self._stored(topic, qid, len(run))
        else:
            for p in run:
                self._fail(p.line_no, f"{r.status.value} (batch of lines {run[0].line_no}-{run[-1].line_no}): "
                                      f"{r.remark}")

    def _stored(self, topic: str, qid: int, n: int) -> None:
        self.result.imported += n
        self.result.topics[topic] = max(self.result.topics.get(topic, -1), qid)

    def _fail(self, line_no: int, why: str) -> None:
        self.result.failed += 1
        self.err.write(f"line {line_no}: {why}\n")

    def register_topics(self) -> int:
        """Make sure every topic written to exists in topics.json with enough queues."""
        changed = 0
        for topic, max_qid in sorted(self.result.topics.items()):
            tc = self.topics.get(topic)
            need = max(max_qid + 1, DEFAULT_QUEUES if tc is None else 0)
            if tc is None:
                self.topics.put(TopicConfig(topic, need, need))
            elif tc.read_queue_nums < need or tc.write_queue_nums < need:
                self.topics.put(dataclasses.replace(tc, read_queue_nums=max(tc.read_queue_nums, need),
                                                    write_queue_nums=max(tc.write_queue_nums, need)))
            else:
                continue
            changed += 1
        if changed:
            self.topics.persist()
        return changed


def unpack_host_ip(host: bytes) -> bytes:
    return bytes(host[:-4])


def parse_host(text: str) -> bytes:
    try:
        return pack_host(*parse_host_port(text))
    except (OSError, ValueError) as e:
        raise IllegalArgumentError(f"{text!r} is not ip:port: {e}") from e


@contextlib.contextmanager
def _input_progress(source: IO[str], err: IO[str]) -> Iterator[Iterable[str]]:
    """``source``'s lines, with a progress bar of the bytes read on ``err`` when it is a
    terminal (a 300,000-message import takes a while); the lines untouched otherwise."""
    if not (hasattr(err, "isatty") and err.isatty()):
        yield source
        return
    from tqdm import tqdm
    total = None
    try:
        st = os.fstat(source.fileno())
        if stat.S_ISREG(st.st_mode):
            total = st.st_size
    except (OSError, AttributeError, ValueError):
        pass  # stdin from a pipe, or not a file: the bar counts without an end
    bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="import", file=err, leave=False,
               dynamic_ncols=True)

    def lines() -> Iterator[str]:
        for line in source:
            bar.update(len(line.encode("utf-8", "surrogatepass")))
            yield line

    try:
        yield lines()
    finally:
        bar.close()


def run_import(path: str, source: IO[str], out: IO[str], err: IO[str], *, batch: bool, sizes: StoreSizes,
               store_host: str = "127.0.0.1:10911") -> int:
    """Import ``source`` into the store at ``path``; returns 0, or 1 if some lines failed."""
    config = store_config(path, sizes)
    host = parse_host(store_host)
    topics = TopicConfigTable.in_dir(config.config_dir)
    topics.load()
    with MessageStore(config) as store:
        if store.recovery_report is not None and not store.recovery_report.clean:
            err.write(f"note: {store.recovery_report.summary()}\n")
        importer = Importer(store, topics, err, batch=batch, store_host=host,
                            born_host=pack_host(unpack_host(host)[0], 0))
        with _input_progress(source, err) as lines:
            result = importer.feed(lines)
    registered = importer.register_topics()
    out.write(f"imported {result.imported} message(s) into {len(result.topics)} topic(s) with {result.calls} "
              f"{'batch ' if batch else ''}put(s); {result.failed} line(s) failed; {registered} topic(s) "
              f"registered in {topics.path}\n")
    return 1 if result.failed else 0
