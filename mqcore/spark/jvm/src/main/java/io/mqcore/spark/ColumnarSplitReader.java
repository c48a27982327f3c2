package io.mqcore.spark;

import static io.mqcore.spark.RecordLayout.*;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.nio.charset.StandardCharsets;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Decodes one split straight into Spark's column vectors: the file is memory-mapped up to
 * the split's limit, each record is checked and only the wanted columns are written (the
 * properties are not even parsed when no wanted column reads them). Batches are reused:
 * Spark consumes a batch before asking for the next one.
 */
final class ColumnarSplitReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger(ColumnarSplitReader.class);
    private static final byte[] RETRY_PREFIX = "%RETRY%".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] DLQ_PREFIX = "%DLQ%".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] HEX = "0123456789ABCDEF".getBytes(StandardCharsets.US_ASCII);
    /** delay levels are clamped to this magnitude, as the Python kernels do */
    private static final long LEVEL_BOUND = 100_000_000L;

    private final CommitLogSplit split;
    private final ReadOptions opts;
    private final ByteBuffer buf;
    private final ByteBuffer littleEndian;  // the same bytes, for eight-byte scans
    private final RecordView rec;
    private final RecordProperties props = new RecordProperties();
    private final HostText bornHost = new HostText();
    private final HostText storeHost = new HostText();
    private final byte[] offsetMsgId = new byte[2 * (HOST_V6_BYTES + 8)];
    private final byte[][] topics;
    private final int limit;
    private final int stop;
    private final boolean needProps;  // a wanted column besides delay_level reads the properties
    private final boolean needDelay;  // delay_level is wanted

    /** vectors by Columns ordinal; null for a column not read */
    private final WritableColumnVector[] col = new WritableColumnVector[Columns.values().length];
    private final ColumnarBatch batch;
    private int keysUsed;
    private int entriesUsed;

    private int pos;
    private long corrupt;
    private long corruptBytes;
    private long missingBytes;  // zeros inside the data, read past with onCorrupt=skip

    ColumnarSplitReader(CommitLogSplit split, ReadOptions opts, StructType readSchema) {
        this.split = split;
        this.opts = opts;
        if (split.limit > Integer.MAX_VALUE) {
            throw new IllegalArgumentException(split.path + ": commitlog files over 2 GiB are not supported");
        }
        this.limit = (int) split.limit;
        this.stop = (int) split.stop;
        try (FileChannel ch = FileChannel.open(Paths.get(split.path), StandardOpenOption.READ)) {
            if (ch.size() < limit) {
                throw new IllegalStateException(split.path + " is shorter than its snapshot: " + ch.size() + " < "
                        + limit + " bytes");
            }
            MappedByteBuffer m = ch.map(FileChannel.MapMode.READ_ONLY, 0, limit);
            this.buf = m;
        } catch (IOException e) {
            throw new UncheckedIOException(split.path, e);
        }
        this.littleEndian = buf.duplicate().order(java.nio.ByteOrder.LITTLE_ENDIAN);
        this.rec = new RecordView(buf);
        this.topics = opts.topics == null ? null : java.util.Arrays.stream(opts.topics)
                .map(t -> t.getBytes(StandardCharsets.UTF_8)).toArray(byte[][]::new);
        ColumnVector[] vectors = new ColumnVector[readSchema.fields().length];
        boolean reads = false;
        for (int i = 0; i < vectors.length; i++) {
            StructField f = readSchema.fields()[i];
            Columns c = Columns.named(f.name());
            OnHeapColumnVector v = new OnHeapColumnVector(opts.maxRowsPerBatch, f.dataType());
            col[c.ordinal()] = v;
            vectors[i] = v;
            reads |= c.readsProperties() && c != Columns.DELAY_LEVEL;
        }
        this.needProps = reads;
        this.needDelay = col[Columns.DELAY_LEVEL.ordinal()] != null;
        this.batch = new ColumnarBatch(vectors);
        this.pos = split.aligned ? (int) split.start
                : rec.find((int) split.start, stop, limit, split.baseOffset, opts.verifyCrc);
    }

    @Override
    public boolean next() {
        for (WritableColumnVector v : col) {
            if (v != null) {
                v.reset();
            }
        }
        keysUsed = 0;
        entriesUsed = 0;
        int n = 0;
        long used = 0;
        while (pos >= 0 && pos < stop) {
            int verdict = rec.check(pos, limit, opts.verifyCrc);
            if (verdict == RecordView.BLANK || (verdict == RecordView.NO_DATA && pos >= limit)) {
                pos = -1;  // the rest of the file holds no records
                break;
            }
            if (verdict == RecordView.NO_DATA) {  // zeros inside the snapshot's data: a torn or zeroed stretch
                if (!opts.skipCorrupt) {
                    throw new IllegalStateException("the store is damaged: data stops early: " + split.path
                            + " holds no records from file position " + pos + " (commitlog offsets ["
                            + (split.baseOffset + pos) + ", " + (split.baseOffset + limit) + ")) although its data "
                            + "runs to " + limit + "; set option onCorrupt=skip to read the records that are there");
                }
                int q = pos + 1 < stop ? rec.find(pos + 1, stop, limit, split.baseOffset, opts.verifyCrc) : -1;
                missingBytes += (q >= 0 ? q : stop) - pos;
                pos = q;
                continue;
            }
            if (verdict != RecordView.OK) {  // CORRUPT, or TRUNCATED: runs past the end of the data
                if (!opts.skipCorrupt) {
                    throw new IllegalStateException("corrupt commitlog record in " + split.path + " at file position "
                            + pos + " (commitlog offset " + (split.baseOffset + pos) + "); set option onCorrupt=skip "
                            + "to read the records that are there, with this report as a warning");
                }
                int q = pos + 1 < stop ? rec.find(pos + 1, stop, limit, split.baseOffset, opts.verifyCrc) : -1;
                corrupt++;
                corruptBytes += (q >= 0 ? q : stop) - pos;
                pos = q;
                continue;
            }
            if (accepts()) {
                if (n > 0 && (n >= opts.maxRowsPerBatch || used + rec.size > opts.maxBytesPerBatch)) {
                    break;
                }
                fill(n);
                n++;
                used += rec.size;
            }
            pos += rec.size;
        }
        batch.setNumRows(n);
        return n > 0;
    }

    private boolean accepts() {
        if (topics != null) {
            boolean found = false;
            for (byte[] t : topics) {
                if (t.length == rec.topicLen && RecordProperties.equal(buf, rec.topicAt, t)) {
                    found = true;
                    break;
                }
            }
            if (!found) {
                return false;
            }
        }
        if (opts.minStoreTs != Long.MIN_VALUE || opts.maxStoreTs != Long.MAX_VALUE) {
            long ts = rec.storeTimestamp();
            return opts.minStoreTs <= ts && ts <= opts.maxStoreTs;
        }
        return true;
    }

    private boolean topicIs(byte[] text, boolean prefix) {
        if (prefix ? rec.topicLen < text.length : rec.topicLen != text.length) {
            return false;
        }
        return RecordProperties.equal(buf, rec.topicAt, text);
    }

    private void fill(int row) {
        final int p = rec.pos;
        final int b = rec.bornExtra;
        final int s = rec.storeExtra;
        final long offset = split.baseOffset + p;
        WritableColumnVector v;
        if ((v = col[Columns.TOPIC.ordinal()]) != null) {
            v.putByteArray(row, buf, rec.topicAt, rec.topicLen);
        }
        if ((v = col[Columns.QUEUE_ID.ordinal()]) != null) {
            v.putInt(row, buf.getInt(p + REC_QUEUEID));
        }
        if ((v = col[Columns.QUEUE_OFFSET.ordinal()]) != null) {
            v.putLong(row, buf.getLong(p + REC_QUEUEOFFSET));
        }
        if ((v = col[Columns.COMMITLOG_OFFSET.ordinal()]) != null) {
            v.putLong(row, offset);
        }
        if ((v = col[Columns.STORE_SIZE.ordinal()]) != null) {
            v.putInt(row, rec.size);
        }
        if ((v = col[Columns.BODY.ordinal()]) != null) {
            if (opts.includeBody) {
                v.putByteArray(row, buf, rec.bodyAt, rec.bodyLen);
            } else {
                v.putNull(row);
            }
        }
        if ((v = col[Columns.BODY_CRC.ordinal()]) != null) {
            v.putInt(row, buf.getInt(p + REC_BODYCRC));
        }
        if ((v = col[Columns.FLAG.ordinal()]) != null) {
            v.putInt(row, buf.getInt(p + REC_FLAG));
        }
        if ((v = col[Columns.SYS_FLAG.ordinal()]) != null) {
            v.putInt(row, rec.sysFlag);
        }
        if ((v = col[Columns.BORN_TIMESTAMP.ordinal()]) != null) {
            v.putLong(row, buf.getLong(p + REC_BORNTIMESTAMP) * 1000);
        }
        if ((v = col[Columns.STORE_TIMESTAMP.ordinal()]) != null) {
            v.putLong(row, buf.getLong(p + REC_STORETIMESTAMP_V4 + b) * 1000);
        }
        if ((v = col[Columns.BORN_HOST.ordinal()]) != null) {
            bornHost.format(buf, p + REC_BORNHOST, HOST_V4_BYTES + b);
            v.putByteArray(row, bornHost.bytes(), 0, bornHost.length());
        }
        int storeHostAt = p + REC_STOREHOST_V4 + b;
        if ((v = col[Columns.STORE_HOST.ordinal()]) != null) {
            storeHost.format(buf, storeHostAt, HOST_V4_BYTES + s);
            v.putByteArray(row, storeHost.bytes(), 0, storeHost.length());
        }
        if ((v = col[Columns.RECONSUME_TIMES.ordinal()]) != null) {
            v.putInt(row, buf.getInt(p + REC_RECONSUMETIMES_V4 + b + s));
        }
        if ((v = col[Columns.PREPARED_TRANSACTION_OFFSET.ordinal()]) != null) {
            v.putLong(row, buf.getLong(p + REC_PREPAREDOFFSET_V4 + b + s));
        }
        if (needProps) {
            props.parse(buf, rec.propsAt, rec.propsLen);
        } else if (needDelay) {
            if (RecordProperties.mayHave(littleEndian, rec.propsAt, rec.propsLen, RecordProperties.DELAY_NAME)) {
                props.parse(buf, rec.propsAt, rec.propsLen);
            } else {
                props.clear();
            }
        }
        if ((v = col[Columns.TAGS.ordinal()]) != null) {
            putProperty(v, row, RecordProperties.TAGS);
        }
        if ((v = col[Columns.KEYS.ordinal()]) != null) {
            putKeys(v, row);
        }
        int omidLen = 0;
        WritableColumnVector msgId = col[Columns.MSG_ID.ordinal()];
        WritableColumnVector omid = col[Columns.OFFSET_MSG_ID.ordinal()];
        if (omid != null || (msgId != null && props.wantedAt[RecordProperties.UNIQ_KEY] < 0)) {
            omidLen = offsetMsgId(storeHostAt, HOST_V4_BYTES + s, offset);
        }
        if (msgId != null) {
            if (props.wantedAt[RecordProperties.UNIQ_KEY] >= 0) {
                putProperty(msgId, row, RecordProperties.UNIQ_KEY);
            } else {
                msgId.putByteArray(row, offsetMsgId, 0, omidLen);
            }
        }
        if (omid != null) {
            omid.putByteArray(row, offsetMsgId, 0, omidLen);
        }
        if ((v = col[Columns.PROPERTIES.ordinal()]) != null) {
            putMap(v, row);
        }
        if ((v = col[Columns.IS_RETRY.ordinal()]) != null) {
            v.putBoolean(row, topicIs(RETRY_PREFIX, true));
        }
        if ((v = col[Columns.IS_DLQ.ordinal()]) != null) {
            v.putBoolean(row, topicIs(DLQ_PREFIX, true));
        }
        if ((v = col[Columns.IS_DELAYED.ordinal()]) != null) {
            v.putBoolean(row, topicIs(SCHEDULE_TOPIC, false));
        }
        if ((v = col[Columns.ORIGINAL_TOPIC.ordinal()]) != null) {
            if (props.wantedAt[RecordProperties.RETRY_TOPIC] >= 0) {
                putProperty(v, row, RecordProperties.RETRY_TOPIC);
            } else if (props.wantedAt[RecordProperties.REAL_TOPIC] >= 0) {
                putProperty(v, row, RecordProperties.REAL_TOPIC);
            } else {
                v.putByteArray(row, buf, rec.topicAt, rec.topicLen);
            }
        }
        if ((v = col[Columns.DELAY_LEVEL.ordinal()]) != null) {
            v.putInt(row, delayLevel());
        }
        if ((v = col[Columns.IS_COMPRESSED.ordinal()]) != null) {
            v.putBoolean(row, (rec.sysFlag & SYSFLAG_COMPRESSED) != 0);
        }
    }

    /** A wanted property's value, or null when the record has none. */
    private void putProperty(WritableColumnVector v, int row, int which) {
        int at = props.wantedAt[which];
        if (at < 0) {
            v.putNull(row);
        } else {
            v.putByteArray(row, props.raw, at, props.wantedLen[which]);
        }
    }

    /** KEYS split on spaces, empty pieces dropped; an empty array without KEYS. */
    private void putKeys(WritableColumnVector v, int row) {
        WritableColumnVector elems = v.getChild(0);
        int first = keysUsed;
        int at = props.wantedAt[RecordProperties.KEYS];
        if (at >= 0) {
            final byte[] raw = props.raw;
            int end = at + props.wantedLen[RecordProperties.KEYS];
            int k = at;
            for (int q = at; q <= end; q++) {
                if (q == end || raw[q] == ' ') {
                    if (q > k) {
                        elems.reserve(keysUsed + 1);
                        elems.putByteArray(keysUsed++, raw, k, q - k);
                    }
                    k = q + 1;
                }
            }
        }
        v.putArray(row, first, keysUsed - first);
    }

    private void putMap(WritableColumnVector v, int row) {
        WritableColumnVector keys = v.getChild(0);
        WritableColumnVector values = v.getChild(1);
        int first = entriesUsed;
        keys.reserve(entriesUsed + props.count);
        values.reserve(entriesUsed + props.count);
        for (int i = 0; i < props.count; i++) {
            if (!props.shadowed[i]) {
                keys.putByteArray(entriesUsed, props.raw, props.nameAt[i], props.nameLen[i]);
                values.putByteArray(entriesUsed, props.raw, props.valueAt[i], props.valueLen[i]);
                entriesUsed++;
            }
        }
        v.putArray(row, first, entriesUsed - first);
    }

    /** Upper-case hex of the store host (address + port) and the commitlog offset; returns its length. */
    private int offsetMsgId(int hostAt, int hostLen, long offset) {
        storeHost.format(buf, hostAt, hostLen);  // cached: formats only when the host changes
        int o = 2 * hostLen;
        System.arraycopy(storeHost.hex(), 0, offsetMsgId, 0, o);
        for (int shift = 60; shift >= 0; shift -= 4) {
            offsetMsgId[o++] = HEX[(int) (offset >>> shift) & 0xF];
        }
        return o;
    }

    /** DELAY as a decimal integer ([+-]digits, clamped), 0 when absent or not a number. */
    private int delayLevel() {
        int at = props.wantedAt[RecordProperties.DELAY];
        if (at < 0) {
            return 0;
        }
        final byte[] raw = props.raw;
        int end = at + props.wantedLen[RecordProperties.DELAY];
        boolean negative = false;
        int q = at;
        byte c0 = raw[q];
        if (c0 == '+' || c0 == '-') {
            negative = c0 == '-';
            q++;
        }
        if (q == end) {
            return 0;
        }
        long value = 0;
        for (; q < end; q++) {
            byte c = raw[q];
            if (c < '0' || c > '9') {
                return 0;
            }
            value = Math.min(value * 10 + (c - '0'), LEVEL_BOUND + 1);  // saturate: only the clamp matters
        }
        value = Math.min(value, LEVEL_BOUND);
        return (int) (negative ? -value : value);
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() {
        batch.close();
        if (corrupt > 0 || missingBytes > 0) {
            LOG.warn("{} [{}, {}): skipped {} corrupt records ({} bytes) and {} bytes without records", split.path,
                    split.start, split.stop, corrupt, corruptBytes, missingBytes);
        }
    }
}
