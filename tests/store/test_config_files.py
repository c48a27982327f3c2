"""Config JSON files: shapes (store-format.md §5.4), fastjson input (test-vectors §7.4), crash safety."""
from __future__ import annotations

import logging
import os
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore.broker import metadata as cf
from mqcore.broker.metadata import (
    ConsumerOffsetTable,
    DelayOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
)
from mqcore.errors import CorruptFileError

TOPICS_JSON_SPEC = """{
\t"dataVersion":{
\t\t"counter":3,
\t\t"timestamp":1700000000000
\t},
\t"topicConfigTable":{
\t\t"TopicTest":{
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":4,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"TopicTest",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":4
\t\t}
\t}
}"""

# what a 4.9 broker really writes for consumer offsets (fastjson pretty format, unquoted keys)
FASTJSON_OFFSETS = """{
\t"offsetTable":{
\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0
\t\t},
\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:248,2:249,3:251
\t\t}
\t}
}"""


def write(path, text: str | bytes) -> None:
    with open(path, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)


def read(path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def fastjson_style(text: str) -> str:
    """Our output with integer map keys unquoted, as fastjson writes them."""
    return re.sub(r'"(-?\d+)":', r"\1:", text)


# --- shapes ----------------------------------------------------------------------------------------
def test_topics_json_matches_spec_shape(tmp_path):
    t = TopicConfigTable.in_dir(str(tmp_path), clock=lambda: 1_700_000_000_000)
    t.data_version = cf.DataVersion(counter=2, timestamp=0)
    t.put(TopicConfig("TopicTest", read_queue_nums=4, write_queue_nums=4))
    assert t.to_json() == TOPICS_JSON_SPEC
    t.persist()
    assert read(tmp_path / "topics.json") == TOPICS_JSON_SPEC


def test_offsets_json_shape_is_standard_json(tmp_path):
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    for qid, off in ((1, 248), (0, 250), (10, 7)):
        c.commit("g1", "TopicTest", qid, off)
    assert c.to_json() == '{\n\t"offsetTable":{\n\t\t"TopicTest@g1":{"0":250,"1":248,"10":7}\n\t}\n}'
    d = DelayOffsetTable.in_dir(str(tmp_path))
    d.update(3, 7)
    d.update(1, 12)
    assert d.to_json() == '{\n\t"offsetTable":{"1":12,"3":7}\n}'
    assert ConsumerOffsetTable.in_dir(str(tmp_path)).to_json() == '{\n\t"offsetTable":{}\n}'


def test_subscription_group_defaults_and_shape(tmp_path):
    s = SubscriptionGroupTable.in_dir(str(tmp_path), clock=lambda: 1_700_000_000_000)
    s.put(SubscriptionGroupConfig("please_rename_unique_group_name_4"))
    text = s.to_json()
    assert ('"please_rename_unique_group_name_4":{\n\t\t\t"brokerId":0,\n\t\t\t"consumeBroadcastEnable":true,'
            '\n\t\t\t"consumeEnable":true,\n\t\t\t"consumeFromMinEnable":true,\n\t\t\t"groupName":'
            '"please_rename_unique_group_name_4",\n\t\t\t"notifyConsumerIdsChangedEnable":true,\n\t\t\t'
            '"retryMaxTimes":16,\n\t\t\t"retryQueueNums":1,\n\t\t\t"whichBrokerWhenConsumeSlowly":1\n\t\t}') in text
    assert '"dataVersion":{\n\t\t"counter":1,\n\t\t"timestamp":1700000000000\n\t}' in text


# --- round trips ---------------------------------------------------------------------------------------
def test_consumer_offsets_round_trip(tmp_path):
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    c.commit("g", "T", 0, 5)
    c.commit("g", "T", 0, -1)  # ignored: clients send -1 for "no offset"
    c.commit("g", "T", 3, 9)
    c.commit("%RETRY%g", "%RETRY%g", 0, 0)
    c.persist()
    again = ConsumerOffsetTable.in_dir(str(tmp_path))
    assert again.load()
    assert again.snapshot() == {"T@g": {0: 5, 3: 9}, "%RETRY%g@%RETRY%g": {0: 0}}
    assert again.query("g", "T", 3) == 9
    assert again.query("g", "T", 1) is None and again.query("x", "T", 0) is None
    assert again.query_queues("g", "T") == {0: 5, 3: 9}
    again.remove("g", "T")
    assert again.query_queues("g", "T") == {}


def test_delay_offsets_round_trip(tmp_path):
    d = DelayOffsetTable.in_dir(str(tmp_path))
    for level in range(1, 19):
        d.update(level, level * 10)
    d.persist()
    again = DelayOffsetTable.in_dir(str(tmp_path))
    assert again.load() and again.snapshot() == d.snapshot() and again.query(18) == 180


def test_topic_and_group_tables_round_trip(tmp_path):
    clock = iter(range(1000, 2000)).__next__
    t = TopicConfigTable.in_dir(str(tmp_path), clock=clock)
    t.put(TopicConfig("A", 8, 8, perm=7, topic_filter_type="MULTI_TAG", topic_sys_flag=1, order=True))
    t.put(TopicConfig("%RETRY%g", 1, 1))
    assert t.remove("%RETRY%g") and not t.remove("nope")
    assert t.data_version == cf.DataVersion(3, 1002)
    t.persist()
    again = TopicConfigTable.in_dir(str(tmp_path))
    assert again.load()
    assert again.snapshot() == t.snapshot() and again.data_version == t.data_version
    assert again.get("A").order is True and again.names() == ["A"]
    s = SubscriptionGroupTable.in_dir(str(tmp_path))
    s.put(SubscriptionGroupConfig("g", retry_max_times=3, consume_broadcast_enable=False))
    s.persist()
    s2 = SubscriptionGroupTable.in_dir(str(tmp_path))
    assert s2.load() and s2.get("g") == SubscriptionGroupConfig("g", retry_max_times=3,
                                                              consume_broadcast_enable=False)


def test_get_returns_a_copy(tmp_path):
    t = TopicConfigTable.in_dir(str(tmp_path))
    t.put(TopicConfig("A", 4, 4))
    t.get("A").perm = 2
    assert t.get("A").perm == 6


def test_fresh_directory_loads_nothing(tmp_path):
    for cls in (ConsumerOffsetTable, DelayOffsetTable, TopicConfigTable, SubscriptionGroupTable):
        table = cls.in_dir(str(tmp_path / "config"))
        assert table.load() is False
        assert table.snapshot() == {}


# --- fastjson input (test-vectors §7.4) ----------------------------------------------------------------
def test_reads_fastjson_unquoted_integer_keys(tmp_path):
    write(tmp_path / "consumerOffset.json", '{"offsetTable":{"TopicTest@cg1":{0:250,1:248}}}')
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    assert c.load() and c.snapshot() == {"TopicTest@cg1": {0: 250, 1: 248}}
    write(tmp_path / "delayOffset.json", '{"offsetTable":{1:12,2:0,3:7}}')
    d = DelayOffsetTable.in_dir(str(tmp_path))
    assert d.load() and d.snapshot() == {1: 12, 2: 0, 3: 7}


def test_reads_a_real_4_9_consumer_offset_file(tmp_path):
    write(tmp_path / "consumerOffset.json", FASTJSON_OFFSETS)
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    assert c.load()
    assert c.query("please_rename_unique_group_name_4", "TopicTest", 3) == 251
    assert c.query("please_rename_unique_group_name_4", "%RETRY%please_rename_unique_group_name_4", 0) == 0


def test_digits_inside_strings_are_not_touched(tmp_path):
    # a naive regex that unquotes/quotes `0:` would corrupt these keys and values
    write(tmp_path / "consumerOffset.json", '{"offsetTable":{"T{0:1},2:3@g":{0:7}, "U@{4:5}":{1:2}}}')
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    assert c.load() and c.snapshot() == {"T{0:1},2:3@g": {0: 7}, "U@{4:5}": {1: 2}}
    write(tmp_path / "topics.json", '{"topicConfigTable":{"A":{"topicName":"A","topicFilterType":"SINGLE_TAG",'
                                    '"perm":6,"readQueueNums":4,"writeQueueNums":4}}}')
    t = TopicConfigTable.in_dir(str(tmp_path))
    assert t.load() and t.get("A") == TopicConfig("A", 4, 4)


def test_reads_5x_files_ignoring_new_fields(tmp_path):
    write(tmp_path / "topics.json", '{"dataVersion":{"counter":2,"stateVersion":0,"timestamp":5},'
                                    '"topicConfigTable":{"T":{"attributes":{},"order":false,"perm":6,'
                                    '"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"T",'
                                    '"topicSysFlag":0,"writeQueueNums":8}}}')
    t = TopicConfigTable.in_dir(str(tmp_path))
    assert t.load() and t.get("T") == TopicConfig("T", 8, 8) and t.data_version == cf.DataVersion(2, 5)
    write(tmp_path / "consumerOffset.json", '{"dataVersion":{"counter":1,"timestamp":1},'
                                            '"offsetTable":{"T@g":{0:1}}}')
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    assert c.load() and c.snapshot() == {"T@g": {0: 1}}


def test_topic_name_defaults_to_the_map_key(tmp_path):
    write(tmp_path / "topics.json", '{"topicConfigTable":{"T":{"perm":6}}}')
    t = TopicConfigTable.in_dir(str(tmp_path))
    assert t.load() and t.get("T") == TopicConfig("T")


# --- crash safety ---------------------------------------------------------------------------------------
def _persisted_twice(tmp_path):
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    c.commit("g", "T", 0, 1)
    c.persist()
    c.commit("g", "T", 0, 2)
    c.persist()
    return c


def test_persist_keeps_the_previous_version_as_bak(tmp_path):
    _persisted_twice(tmp_path)
    assert '"0":1' in read(tmp_path / "consumerOffset.json.bak")
    assert '"0":2' in read(tmp_path / "consumerOffset.json")
    assert sorted(os.listdir(tmp_path)) == ["consumerOffset.json", "consumerOffset.json.bak"]


@pytest.mark.parametrize("damage", ["truncated", "empty", "missing", "garbage", "wrong shape", "bad utf-8"])
def test_damaged_file_falls_back_to_bak(tmp_path, caplog, damage):
    _persisted_twice(tmp_path)
    path = tmp_path / "consumerOffset.json"
    text = read(path)
    if damage == "missing":
        os.unlink(path)
    else:
        write(path, {"truncated": text[: len(text) // 2], "empty": "", "garbage": "\x00\x00\x00\x00",
                     "wrong shape": '{"offsetTable":[1,2]}', "bad utf-8": b'{"offsetTable":{"\xff@g":{}}}'}[damage])
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="mqcore.store.config_files"):
        assert c.load()
    assert c.query("g", "T", 0) == 1  # the previous version, from .bak
    assert "consumerOffset.json.bak instead" in caplog.text
    assert {"truncated": "unparsable", "empty": "empty", "missing": "missing", "garbage": "unparsable",
            "wrong shape": "unparsable", "bad utf-8": "unparsable"}[damage] in caplog.text


def test_both_damaged_is_an_error_not_an_empty_table(tmp_path):
    _persisted_twice(tmp_path)
    write(tmp_path / "consumerOffset.json", "{")
    write(tmp_path / "consumerOffset.json.bak", '{"offsetTable":')
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    with pytest.raises(CorruptFileError, match="unparsable"):
        c.load()


def test_damaged_file_and_no_bak_is_an_error(tmp_path):
    write(tmp_path / "topics.json", '{"topicConfigTable":{"T":{"perm":"six"}}}')
    with pytest.raises(CorruptFileError, match="perm"):
        TopicConfigTable.in_dir(str(tmp_path)).load()
    write(tmp_path / "topics.json", '{"topicConfigTable":{"T":{"topicFilterType":"ANY"}}}')
    with pytest.raises(CorruptFileError, match="topicFilterType"):
        TopicConfigTable.in_dir(str(tmp_path)).load()


def test_leftover_tmp_is_ignored_and_replaced(tmp_path):
    _persisted_twice(tmp_path)
    # a crash after writing X.tmp but before the rename: X is still the last complete version
    write(tmp_path / "consumerOffset.json.tmp", '{"offsetTable":{"T@g":{0:99}}}')
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    assert c.load() and c.query("g", "T", 0) == 2
    write(tmp_path / "consumerOffset.json.tmp", '{"offsetTa')  # a torn tmp is ignored too
    assert c.load() and c.query("g", "T", 0) == 2
    c.commit("g", "T", 0, 3)
    c.persist()
    assert not os.path.exists(tmp_path / "consumerOffset.json.tmp")
    assert ConsumerOffsetTable.in_dir(str(tmp_path)).load()


def test_damaged_file_does_not_overwrite_a_good_bak(tmp_path):
    c = _persisted_twice(tmp_path)
    write(tmp_path / "consumerOffset.json", "{")
    c.commit("g", "T", 0, 3)
    c.persist()
    assert '"0":1' in read(tmp_path / "consumerOffset.json.bak")  # kept, not replaced by "{"
    assert '"0":3' in read(tmp_path / "consumerOffset.json")


def test_concurrent_commits_and_persists(tmp_path):
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    errors: list[BaseException] = []

    def work(qid: int) -> None:
        try:
            for off in range(200):
                c.commit("g", "T", qid, off)
                if off % 50 == 0:
                    c.persist()
        except BaseException as e:  # surfaced by the assert below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(q,)) for q in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    c.persist()
    again = ConsumerOffsetTable.in_dir(str(tmp_path))
    assert again.load() and again.query_queues("g", "T") == {q: 199 for q in range(4)}


# --- properties -------------------------------------------------------------------------------------------
NAME = st.text(alphabet="%|_-abcXYZ019", min_size=1, max_size=20)
OFFSETS = st.dictionaries(st.tuples(NAME, NAME).map(lambda tg: f"{tg[0]}@{tg[1]}"),
                          st.dictionaries(st.integers(0, 1 << 16), st.integers(0, (1 << 63) - 1), max_size=8),
                          max_size=8)


@settings(max_examples=60, deadline=None)
@given(OFFSETS)
def test_offset_table_round_trips_in_both_key_styles(tmp_path_factory, table):
    d = tmp_path_factory.mktemp("cfg")
    c = ConsumerOffsetTable.in_dir(str(d))
    c._replace_locked({k: dict(v) for k, v in table.items()})
    c.persist()
    again = ConsumerOffsetTable.in_dir(str(d))
    assert again.load() and again.snapshot() == table
    write(d / "consumerOffset.json", fastjson_style(c.to_json()))
    java = ConsumerOffsetTable.in_dir(str(d))
    assert java.load() and java.snapshot() == table


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.builds(TopicConfig, topic_name=TEXT, read_queue_nums=st.integers(0, 1024),
                          write_queue_nums=st.integers(0, 1024), perm=st.integers(0, 15),
                          topic_filter_type=st.sampled_from(cf.TOPIC_FILTER_TYPES),
                          topic_sys_flag=st.integers(0, 3), order=st.booleans()), max_size=6),
       st.integers(0, 1 << 40))
def test_topic_table_round_trips_any_names(tmp_path_factory, topics, ts):
    d = tmp_path_factory.mktemp("cfg")
    t = TopicConfigTable.in_dir(str(d), clock=lambda: ts)
    for tc in topics:
        t.put(tc)
    t.persist()
    again = TopicConfigTable.in_dir(str(d))
    assert again.load()
    assert again.snapshot() == t.snapshot() and again.data_version == t.data_version


def test_tables_written_from_kept_entry_texts_are_dumps_pretty(tmp_path):
    """topics.json / subscriptionGroup.json are written from each entry's kept text (a table
    persisted on every change does not encode every entry again): the bytes are still
    dumps_pretty's of the whole table, after puts, changes and removals."""
    from mqcore.jsonutil import dumps_pretty
    t = TopicConfigTable.in_dir(str(tmp_path))
    g = SubscriptionGroupTable.in_dir(str(tmp_path))
    assert t.to_json() == dumps_pretty(t.to_json_value())
    for i in range(40):
        t.put(TopicConfig(f"T{(i * 7919) % 97}-é\"\\", i % 16 + 1, i % 16 + 1, 6, order=i % 3 == 0))
        g.put(SubscriptionGroupConfig(f"g{i % 13}", retry_max_times=i, consume_message_orderly=i % 2 == 0))
        if i % 5 == 4:
            t.remove(t.names()[i % len(t.names())])
        assert t.to_json() == dumps_pretty(t.to_json_value())
        assert g.to_json() == dumps_pretty(g.to_json_value())
    t.persist()
    loaded = TopicConfigTable.in_dir(str(tmp_path))
    assert loaded.load() and loaded.snapshot() == t.snapshot()
    assert loaded.to_json() == dumps_pretty(loaded.to_json_value())


def test_persist_moves_its_own_previous_version_to_bak(tmp_path):
    """A table persisted again renames the file it wrote last to X.bak (no read, parse and copy);
    X.bak is exactly that previous version."""
    t = TopicConfigTable.in_dir(str(tmp_path))
    t.put(TopicConfig("A"))
    t.persist()
    first = read(tmp_path / "topics.json")
    inode = os.stat(tmp_path / "topics.json").st_ino
    t.put(TopicConfig("B"))
    t.persist()
    assert read(tmp_path / "topics.json.bak") == first
    assert os.stat(tmp_path / "topics.json.bak").st_ino == inode  # moved, not copied
    assert '"B"' in read(tmp_path / "topics.json")
    # a file someone else wrote meanwhile (not the version this table wrote) is copied, as before
    write(tmp_path / "topics.json", read(tmp_path / "topics.json").replace('"perm":6', '"perm":4'))
    t.put(TopicConfig("C"))
    t.persist()
    assert '"perm":4' in read(tmp_path / "topics.json.bak") and '"C"' in read(tmp_path / "topics.json")
    assert sorted(os.listdir(tmp_path)) == ["topics.json", "topics.json.bak"]


def test_a_slave_merges_its_masters_offsets_as_apache_s_putall(tmp_path):
    """SlaveSynchronize.syncConsumerOffset: the master's topic@group entries replace the slave's
    (each key's queues as a whole); a key only the slave holds stays; the result is persisted."""
    c = ConsumerOffsetTable.in_dir(str(tmp_path))
    c.commit("onSlave", "T", 0, 5)  # committed on the slave while the master was away
    c.commit("both", "T", 0, 9)
    c.commit("both", "T", 1, 3)
    c.merge_from_json(b'{"offsetTable":{"T@both":{0:10},"T@master":{2:7}}}')
    assert c.snapshot() == {"T@onSlave": {0: 5}, "T@both": {0: 10}, "T@master": {2: 7}}
    again = ConsumerOffsetTable.in_dir(str(tmp_path))
    assert again.load() and again.snapshot() == c.snapshot()
    with pytest.raises(ValueError):
        c.merge_from_json(b'{"offsetTable":{"no-separator":{0:1}}}')
    assert c.snapshot()["T@onSlave"] == {0: 5}  # a malformed document changes nothing
