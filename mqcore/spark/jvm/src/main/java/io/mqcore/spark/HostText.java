package io.mqcore.spark;

import java.nio.ByteBuffer;

/**
 * Hosts as text, {@code ip:port} or {@code [ipv6]:port} with RFC 5952 {@code ::} compression
 * (the longest run of two or more zero groups, the first one on a tie), as the Python kernels
 * write them. The last host's text is kept: a commitlog repeats the same few hosts, so most
 * records cost a byte comparison instead of formatting.
 */
final class HostText {
    private final byte[] lastRaw = new byte[RecordLayout.HOST_V6_BYTES];
    private int lastRawLen = -1;
    private final byte[] text = new byte[64];
    private int textLen;
    private final byte[] hex = new byte[2 * RecordLayout.HOST_V6_BYTES];  // upper-case hex of the raw bytes
    private static final byte[] HEX_DIGITS = "0123456789ABCDEF".getBytes(java.nio.charset.StandardCharsets.US_ASCII);

    /** Format the {@code rawLen} bytes (address + int32 port) at {@code at}; read with {@link #bytes()}/{@link #length()}. */
    void format(ByteBuffer buf, int at, int rawLen) {
        if (rawLen == lastRawLen && same(buf, at, rawLen)) {
            return;
        }
        buf.get(at, lastRaw, 0, rawLen);
        lastRawLen = rawLen;
        for (int i = 0; i < rawLen; i++) {
            hex[2 * i] = HEX_DIGITS[(lastRaw[i] & 0xFF) >>> 4];
            hex[2 * i + 1] = HEX_DIGITS[lastRaw[i] & 0xF];
        }
        int ipLen = rawLen - 4;
        int port = buf.getInt(at + ipLen);
        StringBuilder sb = new StringBuilder(48);
        if (ipLen == 4) {
            for (int i = 0; i < 4; i++) {
                if (i > 0) {
                    sb.append('.');
                }
                sb.append(lastRaw[i] & 0xFF);
            }
        } else {
            int[] groups = new int[8];
            for (int i = 0; i < 8; i++) {
                groups[i] = ((lastRaw[2 * i] & 0xFF) << 8) | (lastRaw[2 * i + 1] & 0xFF);
            }
            int bestAt = -1;
            int bestLen = 0;
            int runAt = -1;
            int runLen = 0;
            for (int i = 0; i < 8; i++) {
                if (groups[i] == 0) {
                    if (runLen == 0) {
                        runAt = i;
                    }
                    runLen++;
                    if (runLen > bestLen) {
                        bestAt = runAt;
                        bestLen = runLen;
                    }
                } else {
                    runLen = 0;
                }
            }
            sb.append('[');
            if (bestLen > 1) {
                appendGroups(sb, groups, 0, bestAt);
                sb.append("::");
                appendGroups(sb, groups, bestAt + bestLen, 8);
            } else {
                appendGroups(sb, groups, 0, 8);
            }
            sb.append(']');
        }
        sb.append(':').append(port);
        textLen = sb.length();
        for (int i = 0; i < textLen; i++) {
            text[i] = (byte) sb.charAt(i);
        }
    }

    private boolean same(ByteBuffer buf, int at, int n) {
        for (int i = 0; i < n; i++) {
            if (buf.get(at + i) != lastRaw[i]) {
                return false;
            }
        }
        return true;
    }

    private static void appendGroups(StringBuilder sb, int[] groups, int from, int to) {
        for (int i = from; i < to; i++) {
            if (i > from) {
                sb.append(':');
            }
            sb.append(Integer.toHexString(groups[i]));
        }
    }

    /** The raw bytes as upper-case hex, {@code 2 * rawLen} of them (the head of an offset message id). */
    byte[] hex() {
        return hex;
    }

    int rawLength() {
        return lastRawLen;
    }

    byte[] bytes() {
        return text;
    }

    int length() {
        return textLen;
    }
}
