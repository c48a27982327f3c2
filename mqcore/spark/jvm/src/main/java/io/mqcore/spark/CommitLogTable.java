package io.mqcore.spark;

import java.util.EnumSet;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The commitlog of one store as a read-only table of records. */
final class CommitLogTable implements SupportsRead {
    private final ReadOptions opts;

    CommitLogTable(ReadOptions opts) {
        this.opts = opts;
    }

    @Override
    public String name() {
        return ReadOptions.FORMAT + " " + opts.path;
    }

    @Override
    @SuppressWarnings("deprecation")  // columns() derives from it; the schema is the simpler spelling
    public StructType schema() {
        return Columns.SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new CommitLogScanBuilder(ReadOptions.parse(options));
    }
}
