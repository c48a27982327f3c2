package io.mqcore.spark;

import java.io.Serializable;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeParseException;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Options of {@code format("rocketmq-jvm")}, with the names and meanings of the Python
 * {@code rocketmq} reader's options (mqcore/spark/options.py). Options that reader has and
 * this one does not are refused by name, as are unknown ones: a typo must not read everything.
 * Ranges are inclusive store times (ms) and [minOffset, maxOffset) commitlog offsets.
 */
final class ReadOptions implements Serializable {
    private static final long serialVersionUID = 1L;

    static final String FORMAT = "rocketmq-jvm";

    private static final Map<String, String> DOC = new LinkedHashMap<>();

    static {
        DOC.put("path", "store root or commitlog directory on the local disk or a shared mount (what .load(path) passes)");
        DOC.put("topics", "comma-separated topics to read (also 'topic')");
        DOC.put("starttime", "earliest store time: epoch ms or ISO-8601 (UTC when no zone), inclusive");
        DOC.put("endtime", "latest store time, inclusive");
        DOC.put("startoffset", "first commitlog offset, inclusive");
        DOC.put("endoffset", "commitlog offset to stop before, exclusive");
        DOC.put("includebody", "false leaves body null and skips copying body bytes (default true)");
        DOC.put("verifycrc", "check BODYCRC; a mismatch is a corrupt record (default false)");
        DOC.put("oncorrupt", "fail (default) or skip: resync after a corrupt record");
        DOC.put("splitsize", "byte-range split size (default 64m); 0 = one partition per file");
        DOC.put("maxrowsperbatch", "rows per columnar batch (default 4096)");
        DOC.put("batchsize", "record bytes per columnar batch (default 32m)");
        DOC.put("snapshotoffset", "read up to this commitlog offset instead of the live end (repeatable reads)");
        DOC.put("timeslackms", "clock slack when pruning files by store time (default 60000)");
    }

    /** Options of format("rocketmq") that this reader does not implement. */
    private static final Set<String> PYTHON_ONLY = Set.of("columns", "decompress", "useconsumequeue", "pushdown");

    private static final Pattern SIZE = Pattern.compile("^\\s*([0-9]+)\\s*([kmgtKMGT]?)([iI]?[bB])?\\s*$");

    String path = "";
    String[] topics;                 // null: every topic
    long minStoreTs = Long.MIN_VALUE;
    long maxStoreTs = Long.MAX_VALUE;
    long minOffset = 0;
    long maxOffset = Long.MAX_VALUE;
    boolean includeBody = true;
    boolean verifyCrc = false;
    boolean skipCorrupt = false;
    // 64 MiB: files spread over the cores; 4096 rows: what Spark's own vectorized readers use,
    // small enough that the batch stays in cache while Spark turns it into rows
    long splitSize = 64L << 20;
    int maxRowsPerBatch = 4096;
    long maxBytesPerBatch = 32L << 20;
    Long snapshotOffset;
    long timeSlackMs = 60_000;

    static ReadOptions parse(Map<String, String> options) {
        ReadOptions o = new ReadOptions();
        for (Map.Entry<String, String> e : options.entrySet()) {
            String name = e.getKey().toLowerCase(Locale.ROOT);
            String value = e.getValue();
            if (name.equals("topic")) {
                name = "topics";
            }
            if (PYTHON_ONLY.contains(name) || name.startsWith("fs.")) {
                throw new IllegalArgumentException("option " + e.getKey() + " is not supported by format " + FORMAT
                        + " (format rocketmq, the Python reader, has it); "
                        + (name.equals("columns") ? "select the columns instead: Spark prunes them for this reader"
                                                  : "use format rocketmq for it"));
            }
            if (!DOC.containsKey(name)) {
                StringBuilder known = new StringBuilder();
                DOC.forEach((k, v) -> known.append("\n  ").append(k).append(": ").append(v));
                throw new IllegalArgumentException("unknown option '" + e.getKey() + "' for format " + FORMAT
                        + "; known options:" + known);
            }
            o.set(name, value);
        }
        if (o.maxRowsPerBatch < 1 || o.maxBytesPerBatch < 1) {
            throw new IllegalArgumentException("maxRowsPerBatch and batchSize must be positive");
        }
        if (o.splitSize < 0) {
            throw new IllegalArgumentException("splitSize must be >= 0");
        }
        return o;
    }

    private void set(String name, String value) {
        switch (name) {
            case "path" -> path = value;
            case "topics" -> topics = Arrays.stream(value.split(",")).map(String::trim).filter(t -> !t.isEmpty())
                    .toArray(String[]::new);
            case "starttime" -> minStoreTs = parseTimeMs(name, value);
            case "endtime" -> maxStoreTs = parseTimeMs(name, value);
            case "startoffset" -> minOffset = parseLong(name, value);
            case "endoffset" -> maxOffset = parseLong(name, value);
            case "includebody" -> includeBody = parseBool(name, value);
            case "verifycrc" -> verifyCrc = parseBool(name, value);
            case "oncorrupt" -> {
                String v = value.trim().toLowerCase(Locale.ROOT);
                if (!v.equals("fail") && !v.equals("skip")) {
                    throw new IllegalArgumentException("option " + name + ": '" + value + "' is not one of fail, skip");
                }
                skipCorrupt = v.equals("skip");
            }
            case "splitsize" -> splitSize = parseSize(name, value);
            case "maxrowsperbatch" -> maxRowsPerBatch = (int) parseLong(name, value);
            case "batchsize" -> maxBytesPerBatch = parseSize(name, value);
            case "snapshotoffset" -> snapshotOffset = parseLong(name, value);
            case "timeslackms" -> timeSlackMs = parseLong(name, value);
            default -> throw new IllegalStateException("option " + name + " is documented but not parsed");
        }
    }

    /** The ranges or the topic list exclude every record. */
    boolean isEmpty() {
        return minStoreTs > maxStoreTs || minOffset >= maxOffset || (topics != null && topics.length == 0);
    }

    ReadOptions copy() {
        ReadOptions o = new ReadOptions();
        o.path = path;
        o.topics = topics == null ? null : topics.clone();
        o.minStoreTs = minStoreTs;
        o.maxStoreTs = maxStoreTs;
        o.minOffset = minOffset;
        o.maxOffset = maxOffset;
        o.includeBody = includeBody;
        o.verifyCrc = verifyCrc;
        o.skipCorrupt = skipCorrupt;
        o.splitSize = splitSize;
        o.maxRowsPerBatch = maxRowsPerBatch;
        o.maxBytesPerBatch = maxBytesPerBatch;
        o.snapshotOffset = snapshotOffset;
        o.timeSlackMs = timeSlackMs;
        return o;
    }

    static boolean parseBool(String name, String value) {
        String v = value.trim().toLowerCase(Locale.ROOT);
        switch (v) {
            case "true", "1", "yes", "on":
                return true;
            case "false", "0", "no", "off":
                return false;
            default:
                throw new IllegalArgumentException("option " + name + ": '" + value + "' is not true/false");
        }
    }

    static long parseLong(String name, String value) {
        try {
            return Long.parseLong(value.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("option " + name + ": '" + value + "' is not an integer");
        }
    }

    static long parseSize(String name, String value) {
        Matcher m = SIZE.matcher(value);
        if (!m.matches()) {
            throw new IllegalArgumentException("option " + name + ": '" + value
                    + "' is not a size such as 134217728, 128m or 1g");
        }
        int shift = switch (m.group(2).toLowerCase(Locale.ROOT)) {
            case "k" -> 10;
            case "m" -> 20;
            case "g" -> 30;
            case "t" -> 40;
            default -> 0;
        };
        return Long.parseLong(m.group(1)) << shift;
    }

    /** Epoch milliseconds from digits or an ISO-8601 time (UTC when it names no zone). */
    static long parseTimeMs(String name, String value) {
        String text = value.trim();
        if (text.matches("-?[0-9]+")) {
            return Long.parseLong(text);
        }
        String iso = text.replace(' ', 'T');
        try {
            return OffsetDateTime.parse(iso.endsWith("Z") ? iso.substring(0, iso.length() - 1) + "+00:00" : iso)
                    .toInstant().toEpochMilli();
        } catch (DateTimeParseException ignored) {
            // no zone: UTC
        }
        try {
            return LocalDateTime.parse(iso).toInstant(ZoneOffset.UTC).toEpochMilli();
        } catch (DateTimeParseException ignored) {
            // a date alone
        }
        try {
            return LocalDate.parse(iso).atStartOfDay().toInstant(ZoneOffset.UTC).toEpochMilli();
        } catch (DateTimeParseException e) {
            throw new IllegalArgumentException("option " + name + ": '" + value
                    + "' is neither epoch milliseconds nor an ISO-8601 time");
        }
    }
}
