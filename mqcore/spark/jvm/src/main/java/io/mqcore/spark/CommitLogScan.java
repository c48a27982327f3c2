package io.mqcore.spark;

import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** One read: the snapshot is taken when Spark plans the partitions, once per query execution. */
final class CommitLogScan implements Scan, Batch {
    private static final Logger LOG = LoggerFactory.getLogger(CommitLogScan.class);

    private final ReadOptions opts;
    private final StructType readSchema;

    CommitLogScan(ReadOptions opts, StructType readSchema) {
        this.opts = opts;
        this.readSchema = readSchema;
    }

    @Override
    public StructType readSchema() {
        return readSchema;
    }

    @Override
    public String description() {
        return ReadOptions.FORMAT + " " + opts.path + (opts.topics == null ? "" : " topics=" + String.join(",", opts.topics))
                + (opts.minStoreTs == Long.MIN_VALUE ? "" : " minStoreTs=" + opts.minStoreTs)
                + (opts.maxStoreTs == Long.MAX_VALUE ? "" : " maxStoreTs=" + opts.maxStoreTs)
                + (opts.minOffset == 0 ? "" : " minOffset=" + opts.minOffset)
                + (opts.maxOffset == Long.MAX_VALUE ? "" : " maxOffset=" + opts.maxOffset);
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        StoreSnapshot snap = StoreSnapshot.locate(opts.path).take(opts.snapshotOffset);
        String damage = snap.damageReport();
        if (damage != null) {
            if (!opts.skipCorrupt) {
                throw new IllegalStateException(damage);
            }
            LOG.warn("onCorrupt=skip reads past damage: {}", damage);
        }
        List<CommitLogSplit> splits = snap.plan(opts);
        return splits.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new ReaderFactory(opts, readSchema);
    }

    /** Serialized to the executors: the options and the columns to build. */
    static final class ReaderFactory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final ReadOptions opts;
        private final StructType readSchema;

        ReaderFactory(ReadOptions opts, StructType readSchema) {
            this.opts = opts;
            this.readSchema = readSchema;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new ColumnarSplitReader((CommitLogSplit) partition, opts, readSchema);
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            // Spark asks for rows only if columnar reads are off; serve them from the batches
            PartitionReader<ColumnarBatch> batches = createColumnarReader(partition);
            return new PartitionReader<>() {
                private java.util.Iterator<InternalRow> rows = java.util.Collections.emptyIterator();

                @Override
                public boolean next() throws java.io.IOException {
                    while (!rows.hasNext()) {
                        if (!batches.next()) {
                            return false;
                        }
                        rows = batches.get().rowIterator();
                    }
                    return true;
                }

                @Override
                public InternalRow get() {
                    return rows.next();
                }

                @Override
                public void close() throws java.io.IOException {
                    batches.close();
                }
            };
        }
    }
}
