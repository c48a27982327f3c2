package io.mqcore.spark;

/**
 * Byte layout of RocketMQ 4.9 store files, big-endian: the Java twin of
 * {@code mqcore/format/layout.py} (tests/spark/test_jvm_source.py checks that both agree).
 * Offsets are those of a record with IPv4 hosts; an IPv6 born host shifts every field after
 * BORNHOST by {@link #HOST_V6_EXTRA}, an IPv6 store host every field after STOREHOST by as much again.
 */
final class RecordLayout {
    private RecordLayout() {
    }

    static final String COMMITLOG_DIR = "commitlog";
    static final String CONSUME_QUEUE_DIR = "consumequeue";
    static final String CHECKPOINT_FILE = "checkpoint";
    static final String LOCK_FILE = "lock";
    static final String ABORT_FILE = "abort";
    static final int DATA_FILE_NAME_DIGITS = 20;

    static final int MAGIC_V1 = -626843481;     // 0xDAA320A7
    static final int MAGIC_V2 = -626843477;     // 0xDAA320AB: 5.x long topics (int16 topic length)
    static final int MAGIC_BLANK = -875286124;  // 0xCBD43194: end-of-file marker

    static final int REC_TOTALSIZE = 0;
    static final int REC_MAGIC = 4;
    static final int REC_BODYCRC = 8;
    static final int REC_QUEUEID = 12;
    static final int REC_FLAG = 16;
    static final int REC_QUEUEOFFSET = 20;
    static final int REC_PHYOFFSET = 28;
    static final int REC_SYSFLAG = 36;
    static final int REC_BORNTIMESTAMP = 40;
    static final int REC_BORNHOST = 48;
    static final int REC_STORETIMESTAMP_V4 = 56;
    static final int REC_STOREHOST_V4 = 64;
    static final int REC_RECONSUMETIMES_V4 = 72;
    static final int REC_PREPAREDOFFSET_V4 = 76;
    static final int REC_BODYLENGTH_V4 = 84;
    static final int REC_FIXED_V4 = 88;
    static final int HOST_V4_BYTES = 8;
    static final int HOST_V6_BYTES = 20;
    static final int HOST_V6_EXTRA = HOST_V6_BYTES - HOST_V4_BYTES;
    static final int BLANK_HEADER_BYTES = 8;

    static final int SYSFLAG_COMPRESSED = 0x1;
    static final int SYSFLAG_BORNHOST_V6 = 0x10;
    static final int SYSFLAG_STOREHOST_V6 = 0x20;

    static final int CQ_UNIT_SIZE = 20;
    static final int CQ_PHYOFFSET = 0;
    static final int CQ_SIZE = 8;
    static final int CQ_FILLER_SIZE = 0x7FFFFFFF;

    static final byte NAME_VALUE_SEPARATOR = 1;
    static final byte PROPERTY_SEPARATOR = 2;
}
