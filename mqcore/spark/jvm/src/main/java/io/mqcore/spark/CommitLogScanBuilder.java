package io.mqcore.spark;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Column pruning (only the wanted columns are decoded) and filter pushdown: topic =/IN,
 * store_timestamp and commitlog_offset comparisons are folded into the options, exactly
 * (store times are whole milliseconds, so bounds on microseconds convert without loss), and
 * Spark does not re-check them. Offsets cut files and byte ranges; store times skip files
 * by their first record's time; both also skip records, as do topics.
 */
final class CommitLogScanBuilder implements SupportsPushDownRequiredColumns, SupportsPushDownFilters {
    private final ReadOptions opts;
    private StructType required = Columns.SCHEMA;
    private Filter[] pushed = new Filter[0];

    CommitLogScanBuilder(ReadOptions opts) {
        this.opts = opts.copy();
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
        Set<String> names = new LinkedHashSet<>(List.of(requiredSchema.fieldNames()));
        List<StructField> keep = new ArrayList<>();
        for (StructField f : Columns.SCHEMA.fields()) {
            if (names.contains(f.name())) {
                keep.add(f);
            }
        }
        required = new StructType(keep.toArray(new StructField[0]));
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
        List<Filter> rest = new ArrayList<>();
        List<Filter> taken = new ArrayList<>();
        for (Filter f : filters) {
            if (fold(f)) {
                taken.add(f);
            } else {
                rest.add(f);
            }
        }
        pushed = taken.toArray(new Filter[0]);
        return rest.toArray(new Filter[0]);
    }

    @Override
    public Filter[] pushedFilters() {
        return pushed;
    }

    @Override
    public Scan build() {
        return new CommitLogScan(opts, required);
    }

    /** Narrow the options by one filter if it is one this reader handles exactly. */
    private boolean fold(Filter f) {
        String[] refs = f.references();
        if (refs.length != 1) {
            return false;
        }
        String column = refs[0];
        Object value = valueOf(f);
        switch (column) {
            case "topic" -> {
                Set<String> wanted = new LinkedHashSet<>();
                if ((f instanceof EqualTo || f instanceof EqualNullSafe) && value instanceof String s) {
                    wanted.add(s);
                } else if (f instanceof In in) {
                    for (Object v : in.values()) {
                        if (!(v instanceof String s)) {
                            return false;
                        }
                        wanted.add(s);
                    }
                } else {
                    return false;
                }
                if (opts.topics != null) {
                    wanted.retainAll(List.of(opts.topics));
                }
                opts.topics = wanted.toArray(new String[0]);
                return true;
            }
            case "store_timestamp" -> {
                Long micros = micros(value);
                if (micros == null) {
                    return false;
                }
                return foldTime(f, micros);
            }
            case "commitlog_offset" -> {
                if (!(value instanceof Long || value instanceof Integer)) {
                    return false;
                }
                return foldOffset(f, ((Number) value).longValue());
            }
            default -> {
                return false;
            }
        }
    }

    private static Object valueOf(Filter f) {
        if (f instanceof EqualTo x) {
            return x.value();
        }
        if (f instanceof EqualNullSafe x) {
            return x.value();
        }
        if (f instanceof GreaterThan x) {
            return x.value();
        }
        if (f instanceof GreaterThanOrEqual x) {
            return x.value();
        }
        if (f instanceof LessThan x) {
            return x.value();
        }
        if (f instanceof LessThanOrEqual x) {
            return x.value();
        }
        return null;
    }

    private static Long micros(Object v) {
        if (v instanceof Timestamp t) {
            return Math.addExact(Math.multiplyExact(Math.floorDiv(t.getTime(), 1000L), 1_000_000L),
                    t.getNanos() / 1000L);
        }
        if (v instanceof Instant i) {
            return Math.addExact(Math.multiplyExact(i.getEpochSecond(), 1_000_000L), i.getNano() / 1000L);
        }
        return null;
    }

    /** Store-time bounds in whole ms: {@code ms * 1000 > v} is {@code ms >= floor(v / 1000) + 1}, and so on. */
    private boolean foldTime(Filter f, long v) {
        long floor = Math.floorDiv(v, 1000L);
        long ceil = -Math.floorDiv(-v, 1000L);
        long lo = Long.MIN_VALUE;
        long hi = Long.MAX_VALUE;
        if (f instanceof GreaterThan) {
            lo = floor + 1;
        } else if (f instanceof GreaterThanOrEqual) {
            lo = ceil;
        } else if (f instanceof LessThan) {
            hi = ceil - 1;
        } else if (f instanceof LessThanOrEqual) {
            hi = floor;
        } else if (f instanceof EqualTo || f instanceof EqualNullSafe) {
            if (Math.floorMod(v, 1000L) == 0) {
                lo = floor;
                hi = floor;
            } else {
                lo = 1;
                hi = 0;  // no whole millisecond equals it: nothing matches
            }
        } else {
            return false;
        }
        opts.minStoreTs = Math.max(opts.minStoreTs, lo);
        opts.maxStoreTs = Math.min(opts.maxStoreTs, hi);
        return true;
    }

    /** [lo, hi) commitlog offsets of an integer comparison. */
    private boolean foldOffset(Filter f, long v) {
        long lo = 0;
        long hi = Long.MAX_VALUE;
        if (f instanceof GreaterThan) {
            lo = v == Long.MAX_VALUE ? Long.MAX_VALUE : v + 1;
        } else if (f instanceof GreaterThanOrEqual) {
            lo = v;
        } else if (f instanceof LessThan) {
            hi = v;
        } else if (f instanceof LessThanOrEqual) {
            hi = v == Long.MAX_VALUE ? Long.MAX_VALUE : v + 1;
        } else if (f instanceof EqualTo || f instanceof EqualNullSafe) {
            lo = v;
            hi = v == Long.MAX_VALUE ? Long.MAX_VALUE : v + 1;
        } else {
            return false;
        }
        opts.minOffset = Math.max(opts.minOffset, Math.max(lo, 0));
        opts.maxOffset = Math.min(opts.maxOffset, hi);
        return true;
    }
}
