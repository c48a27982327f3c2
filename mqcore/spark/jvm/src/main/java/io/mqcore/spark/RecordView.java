package io.mqcore.spark;

import static io.mqcore.spark.RecordLayout.*;

import java.nio.ByteBuffer;
import java.util.zip.CRC32;

/**
 * The record checker: whether a valid commitlog record starts at a position of a file
 * buffer, and where its variable parts are. Same verdicts as the Python and Cython
 * checkers ({@code _check_record}): a record must end exactly where its properties end.
 * One instance is reused record after record (no allocation per record).
 */
final class RecordView {
    // verdicts, with the numbers of mqcore.format.layout.ScanStop
    static final int OK = -1;
    static final int BLANK = 1;
    static final int NO_DATA = 2;
    static final int CORRUPT = 3;
    static final int TRUNCATED = 5;

    private final ByteBuffer buf;
    private final CRC32 crc = new CRC32();

    int pos;
    int size;
    int sysFlag;
    int bornExtra;   // HOST_V6_EXTRA when the born host is IPv6
    int storeExtra;  // HOST_V6_EXTRA when the store host is IPv6
    int bodyAt;      // first body byte
    int bodyLen;
    int topicAt;
    int topicLen;
    int propsAt;
    int propsLen;

    RecordView(ByteBuffer buf) {
        this.buf = buf;
    }

    /** Check the record at {@code pos}, which may run up to {@code end} (a record boundary). */
    int check(int pos, int end, boolean checkCrc) {
        this.pos = pos;
        if (end - pos < BLANK_HEADER_BYTES) {
            for (int i = pos; i < end; i++) {
                if (buf.get(i) != 0) {
                    return TRUNCATED;
                }
            }
            return NO_DATA;
        }
        int total = buf.getInt(pos + REC_TOTALSIZE);
        int magic = buf.getInt(pos + REC_MAGIC);
        if (magic == MAGIC_BLANK) {
            return BLANK;
        }
        if (magic != MAGIC_V1 && magic != MAGIC_V2) {
            return total == 0 && magic == 0 ? NO_DATA : CORRUPT;
        }
        if (total < REC_FIXED_V4 + 3) {
            return CORRUPT;
        }
        if ((long) pos + total > end) {
            return TRUNCATED;
        }
        int recEnd = pos + total;
        int flags = buf.getInt(pos + REC_SYSFLAG);
        int b = (flags & SYSFLAG_BORNHOST_V6) != 0 ? HOST_V6_EXTRA : 0;
        int s = (flags & SYSFLAG_STOREHOST_V6) != 0 ? HOST_V6_EXTRA : 0;
        int lenAt = pos + REC_BODYLENGTH_V4 + b + s;
        if (lenAt + 4 > recEnd) {
            return CORRUPT;
        }
        int bl = buf.getInt(lenAt);
        if (bl < 0 || (long) lenAt + 4 + bl + 3 > recEnd) {
            return CORRUPT;
        }
        int tAt = lenAt + 4 + bl;
        int tLen;
        int tWidth;
        if (magic == MAGIC_V1) {
            tLen = buf.get(tAt);  // Java writes a signed byte: > 127 reads negative
            if (tLen < 0) {
                return CORRUPT;
            }
            tWidth = 1;
        } else {
            tLen = buf.getShort(tAt);
            if (tLen < 0) {
                return CORRUPT;
            }
            tWidth = 2;
        }
        int pLenAt = tAt + tWidth + tLen;
        if (pLenAt + 2 > recEnd) {
            return CORRUPT;
        }
        int pLen = buf.getShort(pLenAt);
        if (pLen < 0 || pLenAt + 2 + pLen != recEnd) {
            return CORRUPT;
        }
        if (checkCrc && bl > 0) {
            crc.reset();
            crc.update(buf.slice(lenAt + 4, bl));
            if ((int) (crc.getValue() & 0x7FFFFFFFL) != buf.getInt(pos + REC_BODYCRC)) {
                return CORRUPT;
            }
        }
        size = total;
        sysFlag = flags;
        bornExtra = b;
        storeExtra = s;
        bodyAt = lenAt + 4;
        bodyLen = bl;
        topicAt = tAt + tWidth;
        topicLen = tLen;
        propsAt = pLenAt + 2;
        propsLen = pLen;
        return OK;
    }

    long storeTimestamp() {
        return buf.getLong(pos + REC_STORETIMESTAMP_V4 + bornExtra);
    }

    /**
     * First {@code q} in [start, stop) holding a valid record whose PHYSICALOFFSET names its
     * own commitlog offset ({@code baseOffset + q}), or -1: how a byte-range split that does
     * not start on a known record boundary finds its first record.
     */
    int find(int start, int stop, int end, long baseOffset, boolean checkCrc) {
        for (int q = start; q < stop; q++) {
            if (q + REC_PHYOFFSET + 8 > end) {
                return -1;
            }
            int magic = buf.getInt(q + REC_MAGIC);
            if ((magic == MAGIC_V1 || magic == MAGIC_V2) && buf.getLong(q + REC_PHYOFFSET) == baseOffset + q
                    && check(q, end, checkCrc) == OK) {
                return q;
            }
        }
        return -1;
    }
}
