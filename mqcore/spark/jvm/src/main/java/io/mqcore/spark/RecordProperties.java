package io.mqcore.spark;

import static io.mqcore.spark.RecordLayout.NAME_VALUE_SEPARATOR;
import static io.mqcore.spark.RecordLayout.PROPERTY_SEPARATOR;

import java.nio.ByteBuffer;

/**
 * The properties of one record, as spans of the file buffer: {@code name U+0001 value}
 * segments joined by U+0002. A segment without a name or a value is skipped and a repeated
 * name keeps its last value only, as Java's HashMap does (mqcore/format/properties.py).
 * The bytes are copied once into {@link #raw} and parsed there: byte-by-byte reads of a
 * mapped buffer cost several times more than of an array. Positions are into {@code raw}.
 * Reused record after record.
 */
final class RecordProperties {
    // the properties the derived columns read, by their index in WANTED
    static final int TAGS = 0;
    static final int KEYS = 1;
    static final int UNIQ_KEY = 2;
    static final int DELAY = 3;
    static final int RETRY_TOPIC = 4;
    static final int REAL_TOPIC = 5;
    private static final byte[][] WANTED = {bytes("TAGS"), bytes("KEYS"), bytes("UNIQ_KEY"), bytes("DELAY"),
            bytes("RETRY_TOPIC"), bytes("REAL_TOPIC")};

    byte[] raw = new byte[4096];
    int count;
    int[] nameAt = new int[16];
    int[] nameLen = new int[16];
    int[] valueAt = new int[16];
    int[] valueLen = new int[16];
    /** entry i is shadowed by a later entry of the same name (not a map entry) */
    boolean[] shadowed = new boolean[16];
    final int[] wantedAt = new int[WANTED.length];
    final int[] wantedLen = new int[WANTED.length];

    private static byte[] bytes(String s) {
        return s.getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    }

    void parse(ByteBuffer buf, int at, int len) {
        if (raw.length < len) {
            raw = new byte[Math.max(len, 2 * raw.length)];
        }
        buf.get(at, raw, 0, len);
        final byte[] b = raw;
        count = 0;
        java.util.Arrays.fill(wantedAt, -1);
        int p = 0;
        while (p < len) {
            int q = p;
            int k = -1;
            byte c;
            while (q < len && (c = b[q]) != PROPERTY_SEPARATOR) {
                if (k < 0 && c == NAME_VALUE_SEPARATOR) {
                    k = q;
                }
                q++;
            }
            if (p < k && k < q - 1) {
                add(p, k - p, k + 1, q - k - 1);
            }
            p = q + 1;
        }
    }

    private void add(int nAt, int nLen, int vAt, int vLen) {
        if (count == nameAt.length) {
            int n = count * 2;
            nameAt = java.util.Arrays.copyOf(nameAt, n);
            nameLen = java.util.Arrays.copyOf(nameLen, n);
            valueAt = java.util.Arrays.copyOf(valueAt, n);
            valueLen = java.util.Arrays.copyOf(valueLen, n);
            shadowed = java.util.Arrays.copyOf(shadowed, n);
        }
        for (int i = 0; i < count; i++) {
            if (!shadowed[i] && nameLen[i] == nLen && java.util.Arrays.equals(raw, nameAt[i], nameAt[i] + nLen,
                    raw, nAt, nAt + nLen)) {
                shadowed[i] = true;
            }
        }
        nameAt[count] = nAt;
        nameLen[count] = nLen;
        valueAt[count] = vAt;
        valueLen[count] = vLen;
        shadowed[count] = false;
        count++;
        for (int w = 0; w < WANTED.length; w++) {
            if (WANTED[w].length == nLen && java.util.Arrays.equals(raw, nAt, nAt + nLen, WANTED[w], 0, nLen)) {
                wantedAt[w] = vAt;
                wantedLen[w] = vLen;
            }
        }
    }

    static final byte[] DELAY_NAME = WANTED[DELAY];
    private static final long ONES = 0x0101010101010101L;
    private static final long HIGH_BITS = 0x8080808080808080L;

    /**
     * Whether the properties at {@code le[at, at + len)} may hold a segment named {@code name}:
     * false when no NAME_VALUE_SEPARATOR is preceded by the name, so the record has no such
     * property and need not be parsed. Eight bytes per step ({@code le} must be little-endian,
     * which makes the lowest flagged byte of {@code (x - ONES) & ~x & HIGH_BITS} the first in
     * memory; that one is exact). Lets a scan that only wants {@code delay_level} skip the
     * properties of the records that were never delayed.
     */
    static boolean mayHave(ByteBuffer le, int at, int len, byte[] name) {
        int end = at + len;
        int i = at;
        while (i + Long.BYTES <= end) {
            long x = le.getLong(i) ^ (NAME_VALUE_SEPARATOR * ONES);  // separator bytes become 0
            long hit = (x - ONES) & ~x & HIGH_BITS;
            if (hit == 0) {
                i += Long.BYTES;
                continue;
            }
            int j = i + (Long.numberOfTrailingZeros(hit) >>> 3);
            if (j - name.length >= at && equal(le, j - name.length, name)) {
                return true;
            }
            i = j + 1;
        }
        for (; i < end; i++) {
            if (le.get(i) == NAME_VALUE_SEPARATOR && i - name.length >= at && equal(le, i - name.length, name)) {
                return true;
            }
        }
        return false;
    }

    /** No property found (what parse leaves when there are none). */
    void clear() {
        count = 0;
        java.util.Arrays.fill(wantedAt, -1);
    }

    static boolean equal(ByteBuffer buf, int at, byte[] text) {
        for (int i = 0; i < text.length; i++) {
            if (buf.get(at + i) != text[i]) {
                return false;
            }
        }
        return true;
    }
}
