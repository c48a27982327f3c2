"""``mqstore``: import -> stats -> dump -> verify round trips, damage detection, exit codes."""
from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys

import pytest

from mqcore.broker.metadata import TopicConfigTable
from mqcore.config import StoreConfig
from mqcore.format import layout as L
from mqcore.message import MessageExtBrokerInner, pack_host
from mqcore.store.message_store import MessageStore
from mqcore.tools import mqstore

SIZES = ["--commitlog-file-size", "65536", "--consume-queue-file-size", "1000", "--index-slots", "97",
         "--index-entries", "3000"]


def lines_for(n: int) -> list[dict]:
    out = []
    for i in range(n):
        m = {"topic": "TopicA" if i % 3 else "TopicB", "tags": f"Tag{i % 5}", "keys": [f"k{i}", f"x{i % 7}"],
             "body": f"hello {i}\nline two"}
        if i % 10 == 0:
            m["properties"] = {"a": "1", "n": 5, "flag": True}
        if i % 17 == 0:
            del m["body"]
            m["body_base64"] = base64.b64encode(bytes(range(i % 256)) + b"\xff").decode()
        if i % 50 == 7:
            m["queue_id"] = 6
        out.append(m)
    return out


def write_jsonl(path, rows, extra: str = "") -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
        f.write(extra)
    return str(path)


def run(capsys, *argv, kernels=None) -> tuple[int, str, str]:
    code = mqstore.main([str(a) for a in argv], kernels=kernels)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def store(tmp_path, capsys):
    rows = lines_for(400)
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    path = tmp_path / "store"
    code, out, err = run(capsys, "import", path, src, *SIZES)
    assert code == 0, err
    assert "imported 400 message(s) into 2 topic(s)" in out
    return path, rows


def dump_records(capsys, path, *extra) -> list[dict]:
    code, out, err = run(capsys, "dump", path, "--commitlog", *extra)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


# --- round trip ---------------------------------------------------------------------------------------
def test_import_stats_dump_verify_round_trip(store, capsys, kernels):
    path, rows = store
    code, out, err = run(capsys, "dump", path, "--commitlog", kernels=kernels)
    assert code == 0, err
    recs = [json.loads(line) for line in out.splitlines()]
    assert len(recs) == 400
    for src, rec in zip(rows, recs):
        assert rec["topic"] == src["topic"]
        props = rec["properties"]
        assert props["TAGS"] == src["tags"] and props["KEYS"] == " ".join(src["keys"])
        assert props["CLUSTER"] == "DefaultCluster" and len(props["UNIQ_KEY"]) == 32
        if "body" in src:
            assert rec["body"] == src["body"]
        else:
            assert base64.b64decode(rec["body_base64"]) == base64.b64decode(src["body_base64"])
        if "properties" in src:
            assert props["a"] == "1" and props["n"] == "5" and props["flag"] == "true"
        assert rec["offset"] == rec["physical_offset"]
        assert rec["msg_id"] == "7F00000100002A9F%016X" % rec["offset"]
    # files rolled over: records continue across commitlog files
    assert recs[-1]["offset"] > 65536

    code, out, _ = run(capsys, "stats", path, "--json", kernels=kernels)
    assert code == 0
    st = json.loads(out)
    assert st["totals"]["messages"] == 400 and st["totals"]["topics"] == 2
    assert st["totals"]["bytes"] == sum(r["size"] for r in recs)
    a = st["topics"]["TopicA"]
    assert a["messages"] == sum(1 for r in rows if r["topic"] == "TopicA")
    for qid, q in a["queues"].items():
        assert q["cq_max_offset"] == q["max_queue_offset"] + 1 == q["messages"]
    assert "6" in a["queues"]  # explicit queue id

    code, out, _ = run(capsys, "verify", path, kernels=kernels)
    assert code == 0 and "OK: no problems" in out and "400 records" in out and "1200 entries" in out

    # topics were registered with enough queues for queue id 6
    topics = TopicConfigTable.in_dir(os.path.join(path, "config"))
    assert topics.load() and topics.get("TopicA").write_queue_nums == 7
    assert topics.get("TopicB").write_queue_nums == 7


def test_dump_consume_queue_and_index(store, capsys):
    path, _ = store
    recs = {r["offset"]: r for r in dump_records(capsys, path)}
    code, out, _ = run(capsys, "dump", path, "--cq", "TopicA", "1")
    units = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and units and [u["queue_offset"] for u in units] == list(range(len(units)))
    for u in units:
        r = recs[u["phy_offset"]]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["size"]) == ("TopicA", 1, u["queue_offset"], u["size"])
    code, out, _ = run(capsys, "dump", path, "--cq", "TopicA", "1", "--from", "3", "--limit", "2")
    assert [json.loads(line)["queue_offset"] for line in out.splitlines()] == [3, 4]

    index_files = sorted(os.listdir(os.path.join(path, "index")))
    code, out, _ = run(capsys, "dump", path, "--index", index_files[0], "--limit", "5")
    header, *entries = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and header["type"] == "header" and (header["slots"], header["entries"]) == (97, 3000)
    assert [e["index"] for e in entries] == [1, 2, 3, 4, 5]
    assert entries[0]["phy_offset"] == header["begin_phy_offset"] == 0
    assert all(e["phy_offset"] in recs and e["slot"] == e["key_hash"] % 97 for e in entries)
    code, out, _ = run(capsys, "dump", path, "--index", os.path.join(path, "index", index_files[0]),
                       "--from", "1199", "--format", "table")
    assert code == 0 and "index_count: 1201" in out and out.strip().splitlines()[-1].startswith("1200 ")


def test_dump_from_offset_and_table_format(store, capsys):
    path, _ = store
    recs = dump_records(capsys, path)
    second_file = [r for r in recs if r["offset"] >= 65536]
    # --from inside a record or in the blank at a file end: starts at the next record
    got = dump_records(capsys, path, "--from", str(second_file[0]["offset"] - 3), "--limit", "2")
    assert [r["offset"] for r in got] == [r["offset"] for r in second_file[:2]]
    got = dump_records(capsys, path, "--from", str(recs[5]["offset"]), "--limit", "1")
    assert got == [recs[5]]
    code, out, _ = run(capsys, "dump", path, "--commitlog", "--limit", "3", "--format", "table")
    table = out.splitlines()
    assert code == 0 and table[0].split()[:3] == ["OFFSET", "SIZE", "TOPIC"] and len(table) == 4
    assert "hello 1\\nline two" in table[2]
    code, out, _ = run(capsys, "stats", path)
    assert code == 0 and out.splitlines()[0].split()[:3] == ["TOPIC", "QID", "MESSAGES"]
    assert any(line.startswith("TOTAL") and " 400 " in line for line in out.splitlines())


def test_import_batch_mode_delay_and_bad_lines(tmp_path, capsys):
    rows = [{"topic": "T", "queue_id": 0, "body": f"m{i}", "keys": "k"} for i in range(300)]
    rows.append({"topic": "T", "body": "later", "delay_level": 3, "queue_id": 2})
    rows.append({"topic": "U", "body": "x", "queue_id": 1})
    bad = ('{"topic":"bad topic","body":"x"}\n\nnot json\n{"topic":"T","tag":"x","body":"x"}\n'
           '{"topic":"T","body":"x","body_base64":"eA=="}\n{"topic":"T","body":"x","properties":{"p":"a\\u0001b"}}\n'
           '{"topic":"T","body_base64":"***"}\n{"topic":"T","queue_id":-1,"body":"x"}\n')
    src = write_jsonl(tmp_path / "in.jsonl", rows, bad)
    path = tmp_path / "store"
    code, out, err = run(capsys, "import", path, src, "--batch", *SIZES)
    assert code == 1  # some lines failed, the rest went in
    assert "imported 302 message(s)" in out and "7 line(s) failed" in out
    # 300 messages of T/0 in batches of at most 256 -> 2 batch puts, plus the delayed one and U
    assert "with 4 batch put(s)" in out
    for line_no, what in ((303, "characters outside"), (305, "not JSON"), (306, "unknown field(s) tag"),
                          (307, "exactly one of"), (308, "U+0001"), (309, "not base64"), (310, "negative")):
        assert f"line {line_no}: " in err and what in err
    code, out, _ = run(capsys, "stats", path, "--json")
    st = json.loads(out)
    assert st["topics"]["T"]["queues"]["0"]["messages"] == 300
    assert st["topics"]["SCHEDULE_TOPIC_XXXX"]["queues"]["2"]["messages"] == 1
    delayed = [r for r in dump_records(capsys, path) if r["topic"] == "SCHEDULE_TOPIC_XXXX"]
    assert delayed[0]["properties"]["REAL_TOPIC"] == "T" and delayed[0]["properties"]["REAL_QID"] == "2"
    assert run(capsys, "verify", path)[0] == 0
    # a second import appends after what is there (recovery + queue offsets continue)
    src2 = write_jsonl(tmp_path / "more.jsonl", [{"topic": "T", "queue_id": 0, "body": "again"}])
    assert run(capsys, "import", path, src2)[0] == 0
    assert json.loads(run(capsys, "stats", path, "--json")[1])["topics"]["T"]["queues"]["0"]["max_queue_offset"] == 300


def test_import_from_stdin_round_robins_over_four_queues(tmp_path, monkeypatch, capsys):
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps({"topic": "R", "body": str(i)}) + "\n"
                                                         for i in range(8))))
    path = tmp_path / "store"
    assert run(capsys, "import", path, "-", *SIZES)[0] == 0
    st = json.loads(run(capsys, "stats", path, "--json")[1])
    assert {q: v["messages"] for q, v in st["topics"]["R"]["queues"].items()} == {"0": 2, "1": 2, "2": 2, "3": 2}


# --- damage -----------------------------------------------------------------------------------------------
def _flip(path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def test_verify_catches_a_flipped_body_byte(store, capsys):
    path, _ = store
    rec = dump_records(capsys, path, "--limit", "2")[1]
    _flip(os.path.join(path, "commitlog", "%020d" % 0), rec["offset"] + L.REC_FIXED_V4 + 1)
    code, out, _ = run(capsys, "verify", path)
    assert code == 1
    assert f"BODYCRC mismatch in the record at offset {rec['offset']}" in out and "FAILED: 1 problem(s)" in out


def test_verify_catches_a_unit_pointing_at_the_wrong_place(store, capsys):
    path, _ = store
    code, out, _ = run(capsys, "dump", path, "--cq", "TopicA", "2", "--limit", "2")
    u0, u1 = [json.loads(line) for line in out.splitlines()]
    cq = os.path.join(path, "consumequeue", "TopicA", "2", "%020d" % 0)
    with open(cq, "r+b") as f:  # unit 1 now points at unit 0's record (a real record, wrong queue offset)
        f.seek(L.CQ_UNIT_SIZE + L.CQ_PHYOFFSET)
        f.write(struct.pack(">qi", u0["phy_offset"], u0["size"]))
        f.seek(2 * L.CQ_UNIT_SIZE + L.CQ_PHYOFFSET)  # unit 2 points into the middle of a record
        f.write(struct.pack(">q", u1["phy_offset"] + 8))
    code, out, _ = run(capsys, "verify", path)
    assert code == 1
    assert "consume queue TopicA/2 unit 1" in out and "another queue offset" in out
    assert "consume queue TopicA/2 unit 2" in out and "is not the start of a record" in out


def test_verify_catches_garbage_and_data_after_the_end(store, capsys):
    path, _ = store
    first = os.path.join(path, "commitlog", "%020d" % 0)
    with open(first, "r+b") as f:
        f.seek(1000)
        f.write(b"\x12\x34\x56\x78" * 4)  # a record's header destroyed: the rest of this file is unreadable
    code, out, _ = run(capsys, "verify", path)
    assert code == 1 and "corrupt record at offset" in out
    assert "later file(s) 00000000000000065536 hold data; recovery would delete them" in out
    # dump stops there with a message, not a traceback
    code, out, err = run(capsys, "dump", path, "--commitlog")
    assert code == 1 and "corrupt record" in err and "Traceback" not in err
    assert run(capsys, "stats", path)[0] == 1


def test_verify_reports_odd_file_sizes(store, capsys):
    path, _ = store
    with open(os.path.join(path, "commitlog", "%020d" % 65536), "ab") as f:
        f.write(b"\0" * 10)
    cq = os.path.join(path, "consumequeue", "TopicB", "0", "%020d" % 0)
    with open(cq, "ab") as f:
        f.write(b"\0" * 3)
    code, out, _ = run(capsys, "verify", path)
    assert code == 1 and "[file size]" in out and "not a multiple of 20" in out
    code, _, err = run(capsys, "dump", path, "--cq", "TopicB", "0")
    assert code == 1 and "not a multiple of 20" in err


def test_verify_is_read_only_and_works_on_a_live_store(store, capsys):
    path, _ = store
    cfg = StoreConfig(store_path=str(path), commitlog_file_size_bytes=65536, consume_queue_file_size_bytes=1000,
                      index_slots=97, index_entries=3000)
    before = {f: os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs}
    for _ in range(2):  # the tool changes nothing: a read-only run leaves every file as it was
        assert run(capsys, "verify", path)[0] == 0 and run(capsys, "stats", path)[0] == 0
    assert {f: os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs} == before
    with MessageStore(cfg) as live:  # holds the lock; the tool does not need it
        live.put_message(MessageExtBrokerInner(topic="TopicA", body=b"live", queue_id=0,
                                               store_host=pack_host("127.0.0.1", 10911)))
        code, out, _ = run(capsys, "verify", path)
        assert code == 0 and "401 records" in out and "abort file is present" in out
        assert run(capsys, "stats", path)[0] == 0
        assert len(dump_records(capsys, path)) == 401
    after = {f: os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs}
    assert set(after) >= set(before)


# --- exit codes ---------------------------------------------------------------------------------------------
def test_exit_codes_for_paths_and_arguments(tmp_path, capsys):
    code, _, err = run(capsys, "stats", tmp_path / "nope")
    assert code == 2 and "is not a directory" in err
    code, _, err = run(capsys, "verify", tmp_path)
    assert code == 2 and "is not a store directory" in err
    (tmp_path / "notes.txt").write_text("hi")
    code, _, err = run(capsys, "import", tmp_path, tmp_path / "notes.txt")
    assert code == 2 and "is not a store directory" in err
    code, _, err = run(capsys, "import", tmp_path / "s", tmp_path / "missing.jsonl")
    assert code == 2 and "cannot read" in err
    assert run(capsys, "dump", tmp_path)[0] == 2  # neither --commitlog, --cq nor --index
    assert run(capsys, "frobnicate")[0] == 2
    assert run(capsys, "--help")[0] == 0


def test_missing_queue_and_index_file_are_usage_errors(store, capsys):
    path, _ = store
    code, _, err = run(capsys, "dump", path, "--cq", "Nope", "0")
    assert code == 2 and "no consume queue Nope/0" in err
    code, _, err = run(capsys, "dump", path, "--index", "20200101000000000")
    assert code == 2 and "no index file" in err


def test_import_refuses_a_store_locked_by_another_process(store, capsys):
    path, _ = store
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_RDWR); "
                                "fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0); print('ready', flush=True); sys.stdin.read()"),
         os.path.join(path, "lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        src = write_jsonl(path.parent / "x.jsonl", [{"topic": "T", "body": "b"}])
        code, _, err = run(capsys, "import", path, src)
        assert code == 2 and "locked by another process" in err
        assert run(capsys, "verify", path)[0] == 0  # readers do not care about the lock
    finally:
        holder.communicate("")


def test_runs_as_a_module_in_a_subprocess(store):
    path, _ = store
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-m", "mqcore.tools.mqstore", "stats", str(path), "--json"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["totals"]["messages"] == 400
    proc = subprocess.run([sys.executable, "-m", "mqcore.tools.mqstore", "verify", str(path.parent)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 2 and "not a store directory" in proc.stderr and "Traceback" not in proc.stderr


def test_import_help_documents_the_json_lines_format_and_its_examples_import(tmp_path, capsys):
    code, text, _err = run(capsys, "import", "--help")
    assert code == 0
    for field in ("topic", "body", "body_base64", "queue_id", "tags", "keys", "properties", "delay_level", "flag"):
        assert f"\n  {field} " in text, field
    examples = [line.strip() for line in text.splitlines() if line.strip().startswith('{"topic"')]
    assert len(examples) == 3
    src = tmp_path / "help.jsonl"
    src.write_text("\n".join(examples) + "\n")
    code, out, err = run(capsys, "import", str(tmp_path / "s"), str(src), *SIZES)
    assert code == 0, err
    with MessageStore(StoreConfig(store_path=str(tmp_path / "s"), commitlog_file_size_bytes=65536,
                                  consume_queue_file_size_bytes=1000, index_slots=97, index_entries=3000)) as s:
        m = s.look_message_by_offset(s.get_commitlog_offset_in_queue("Orders", 1, 0))
        assert (m.body, m.flag, m.properties["TAGS"], m.properties["KEYS"]) == (b"\0\1\2", 7, "created", "order-1 c-9")
        assert s.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2) == 1  # delay level 3


def test_import_shows_a_progress_bar_on_a_terminal_only(tmp_path):
    """`mqstore import` draws a bar of the input read when stderr is a terminal (a pty here),
    and writes nothing of the kind into a pipe."""
    import json as _json
    import pty

    src = tmp_path / "in.jsonl"
    src.write_text("".join(_json.dumps({"topic": "Bar", "body": f"m{i}" * 20}) + "\n" for i in range(3000)))
    argv = [sys.executable, "-m", "mqcore.tools.mqstore", "import", str(tmp_path / "s1"), str(src)]
    import fcntl
    import select
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    seen = b""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        while True:  # drain the terminal while the import runs (a full pty would block it)
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the other end closed
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        out, _ = proc.communicate(timeout=120)
    finally:
        os.close(master)
    assert proc.returncode == 0 and "imported 3000 message(s)" in out
    text = seen.decode(errors="replace")
    assert "import:" in text and "/356k" in text and "B/s" in text, text[-500:]  # bytes read of the file
    piped = subprocess.run([sys.executable, "-m", "mqcore.tools.mqstore", "import", str(tmp_path / "s2"), str(src)],
                           capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "%" not in piped.stderr and "\r" not in piped.stderr
