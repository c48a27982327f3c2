package io.mqcore.spark;

import static io.mqcore.spark.RecordLayout.*;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

/**
 * The part of a store one read may see, fixed once at planning time (the rules of
 * mqcore/spark/files.py): the commitlog files that hold data, and {@code endOffset}, below
 * which every record is complete. The active file is walked with CRC checks from where the
 * consume queues say dispatch got, so a record being written while Spark plans is left
 * out. Readers never look past {@code endOffset}: a live store yields a consistent prefix.
 */
final class StoreSnapshot {

    /** One commitlog file: its path, the commitlog offset of its byte 0, its size. */
    record DataFile(String path, long baseOffset, long size) {
    }

    final Path root;        // null for a bare commitlog directory
    final Path commitlog;
    final List<DataFile> files = new ArrayList<>();
    final List<Long> firstTs = new ArrayList<>();  // store time of each file's first record, -1 unknown
    long endOffset;
    /** What of the store this read cannot see (mqcore/spark/damage.py's planning-time survey). */
    final List<String> damage = new ArrayList<>();
    long damagedMessages;

    private StoreSnapshot(Path root, Path commitlog) {
        this.root = root;
        this.commitlog = commitlog;
    }

    /** Accept a store root (holding commitlog/) or a commitlog directory itself. */
    static StoreSnapshot locate(String path) {
        if (path == null || path.isEmpty()) {
            throw new IllegalArgumentException("no path given: use .load('/path/to/store') or option('path', ...)");
        }
        Path p;
        if (path.contains("://") || path.startsWith("file:")) {
            URI uri = URI.create(path);
            if (!"file".equals(uri.getScheme())) {
                throw new IllegalArgumentException("format " + ReadOptions.FORMAT + " reads stores on the local disk "
                        + "or a shared mount, not " + path + "; format('rocketmq') reads remote stores");
            }
            p = Paths.get(uri);
        } else {
            p = Paths.get(path);
        }
        if (!Files.isDirectory(p)) {
            throw new IllegalArgumentException(p + " is not a directory: expected a RocketMQ store root "
                    + "(the broker's storePathRootDir, holding commitlog/) or its commitlog/ directory");
        }
        List<String> names = list(p);
        if (names.contains(COMMITLOG_DIR) || names.contains(CHECKPOINT_FILE) || names.contains(CONSUME_QUEUE_DIR)
                || names.contains(LOCK_FILE) || names.contains(ABORT_FILE)) {
            return new StoreSnapshot(p, p.resolve(COMMITLOG_DIR));
        }
        if (names.stream().anyMatch(StoreSnapshot::isDataFileName)) {
            Path parent = p.toAbsolutePath().getParent();
            boolean inStore = p.getFileName() != null && p.getFileName().toString().equals(COMMITLOG_DIR);
            return new StoreSnapshot(inStore ? parent : null, p);
        }
        throw new IllegalArgumentException(p + " is not a RocketMQ store: it has no commitlog/ directory and no "
                + "commitlog files (20-digit names such as 00000000000000000000)");
    }

    static boolean isDataFileName(String name) {
        if (name.length() != DATA_FILE_NAME_DIGITS) {
            return false;
        }
        for (int i = 0; i < name.length(); i++) {
            if (name.charAt(i) < '0' || name.charAt(i) > '9') {
                return false;
            }
        }
        return true;
    }

    private static List<String> list(Path dir) {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(x -> x.getFileName().toString()).sorted().toList();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Take the snapshot: list the files, and walk the active one unless the end is pinned. */
    StoreSnapshot take(Long pinnedEnd) {
        List<DataFile> all = new ArrayList<>();
        if (Files.isDirectory(commitlog)) {
            for (String name : list(commitlog)) {
                if (isDataFileName(name)) {
                    Path f = commitlog.resolve(name);
                    all.add(new DataFile(f.toString(), Long.parseLong(name), size(f)));
                }
            }
        }
        all.sort((a, b) -> Long.compare(a.baseOffset, b.baseOffset));
        for (int i = 1; i < all.size(); i++) {
            DataFile a = all.get(i - 1);
            if (a.baseOffset + a.size > all.get(i).baseOffset) {
                throw new IllegalStateException("commitlog files overlap: " + a.path + " (" + a.size
                        + " bytes) runs into " + all.get(i).path);
            }
        }
        List<DataFile> data = new ArrayList<>();
        List<Long> ts = new ArrayList<>();
        for (DataFile f : all) {
            long first = firstRecordTs(f);
            if (first != NOTHING) {
                data.add(f);
                ts.add(first);
            }
        }
        if (data.isEmpty()) {
            endOffset = 0;
            return this;
        }
        DataFile last = data.get(data.size() - 1);
        long dispatched = -1;
        if (pinnedEnd != null) {
            endOffset = pinnedEnd;
        } else {
            dispatched = dispatchedOffset();
            boolean inside = last.baseOffset <= dispatched && dispatched < last.baseOffset + last.size;
            endOffset = last.baseOffset + completeEnd(last, inside ? dispatched - last.baseOffset : 0);
        }
        for (int i = 0; i < data.size(); i++) {
            if (data.get(i).baseOffset < endOffset) {
                files.add(data.get(i));
                firstTs.add(ts.get(i));
            }
        }
        survey(all, dispatched);
        return this;
    }

    /**
     * Holes between the files holding data (a missing or empty middle file) and consume
     * queues pointing past the log's end, each with the messages the queues list there: the
     * rules of mqcore/format/damage.py, so both readers refuse the same stores.
     */
    private void survey(List<DataFile> all, long dispatched) {
        for (int i = 1; i < files.size(); i++) {
            DataFile a = files.get(i - 1);
            long end = a.baseOffset + a.size;
            long next = files.get(i).baseOffset;
            if (next > end) {
                boolean absent = all.stream().noneMatch(f -> f.baseOffset >= end && f.baseOffset < next);
                note(absent ? "missing file" : "empty file", end, next, "after " + Paths.get(a.path).getFileName(),
                        Long.MAX_VALUE);
            }
        }
        // listed again after the queues were read: a file a live store's writer rolled to meanwhile
        // holds what they point at, and is no damage
        boolean grew = Files.isDirectory(commitlog) && list(commitlog).stream()
                .anyMatch(n -> isDataFileName(n) && Long.parseLong(n) >= endOffset);
        if (dispatched > endOffset && !files.isEmpty() && !grew) {
            note("past the log end", endOffset, dispatched,
                    "the file(s) after " + Paths.get(files.get(files.size() - 1).path).getFileName(), Long.MAX_VALUE);
        }
    }

    private void note(String kind, long lo, long hi, String where, long countTo) {
        long units = unitsIn(lo, kind.equals("past the log end") ? countTo : hi);
        damagedMessages += units;
        damage.add(kind + ": commitlog offsets [" + lo + ", " + hi + ") (" + (hi - lo) + " bytes) in " + where
                + "; the consume queues list " + units + " message(s) there");
    }

    /** The damage as an error (none: null); the option that reads past it is named. */
    String damageReport() {
        if (damage.isEmpty()) {
            return null;
        }
        return "the store is damaged, so this read would silently miss records: " + (root != null ? root : commitlog)
                + ": " + damage.size() + " damaged range(s), " + damagedMessages + " message(s) the consume queues "
                + "list are unreadable\n  " + String.join("\n  ", damage)
                + "\nset option onCorrupt=skip to read the records that are there, with this report as a warning; "
                + "`mqstore verify STORE` lists every problem";
    }

    /** Consume-queue units (fillers aside) pointing into commitlog offsets [lo, hi). */
    long unitsIn(long lo, long hi) {
        long n = 0;
        for (List<Path> queue : queueFiles()) {
            for (Path file : queue) {
                n += unitsIn(file, lo, hi);
            }
        }
        return n;
    }

    private static long unitsIn(Path file, long lo, long hi) {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            ByteBuffer v = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
            long n = 0;
            for (int at = 0; at + CQ_UNIT_SIZE <= ch.size(); at += CQ_UNIT_SIZE) {  // the error path only
                long phy = v.getLong(at + CQ_PHYOFFSET);
                int size = v.getInt(at + CQ_SIZE);
                if (size <= 0 || phy < 0) {
                    break;
                }
                if (size != CQ_FILLER_SIZE && phy >= lo && phy < hi) {
                    n++;
                }
            }
            return n;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Position in file i past which nothing belongs to the snapshot. */
    long dataEnd(int i) {
        DataFile f = files.get(i);
        return Math.max(0, Math.min(f.size, endOffset - f.baseOffset));
    }

    private static long size(Path f) {
        try {
            return Files.size(f);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static final long NOTHING = Long.MIN_VALUE;

    /** Store time of the file's first record; -1 when unknown; NOTHING when the file holds nothing. */
    private static long firstRecordTs(DataFile f) {
        ByteBuffer head = readAt(Paths.get(f.path), 0, REC_STOREHOST_V4 + HOST_V6_EXTRA);
        if (head.limit() < BLANK_HEADER_BYTES || (head.getLong(0) == 0)) {
            return NOTHING;
        }
        int magic = head.getInt(REC_MAGIC);
        if ((magic != MAGIC_V1 && magic != MAGIC_V2) || head.limit() < REC_STOREHOST_V4 + HOST_V6_EXTRA) {
            return -1;
        }
        int sysFlag = head.getInt(REC_SYSFLAG);
        return head.getLong(REC_STORETIMESTAMP_V4 + ((sysFlag & SYSFLAG_BORNHOST_V6) != 0 ? HOST_V6_EXTRA : 0));
    }

    private static ByteBuffer readAt(Path path, long pos, int n) {
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
            ByteBuffer b = ByteBuffer.allocate(n);
            while (b.hasRemaining()) {
                if (ch.read(b, pos + b.position()) < 0) {
                    break;
                }
            }
            b.flip();
            return b;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * The end of complete records in the active file: walk CRC-checked records from
     * {@code start} (a record boundary the consume queues vouch for); a blank marker means
     * the whole file. If nothing valid starts there after all, walk from the beginning.
     */
    private static long completeEnd(DataFile f, long start) {
        try (FileChannel ch = FileChannel.open(Paths.get(f.path), StandardOpenOption.READ)) {
            int size = (int) Math.min(f.size, ch.size());
            MappedByteBuffer buf = ch.map(FileChannel.MapMode.READ_ONLY, 0, size);
            RecordView rec = new RecordView(buf);
            int pos = (int) start;
            int count = 0;
            int verdict = RecordView.OK;
            while (pos < size && (verdict = rec.check(pos, size, true)) == RecordView.OK) {
                pos += rec.size;
                count++;
            }
            if (count == 0 && start > 0 && verdict != RecordView.NO_DATA && verdict != RecordView.BLANK) {
                return completeEnd(f, 0);  // not a record boundary after all
            }
            return verdict == RecordView.BLANK ? f.size : pos;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Commitlog offset up to which the consume queues are complete (-1 if unknown): the
     * furthest unit end over the last file of every queue, as the store dispatches records
     * in commitlog order.
     */
    long dispatchedOffset() {
        long best = -1;
        for (List<Path> queue : queueFiles()) {
            if (!queue.isEmpty()) {
                best = Math.max(best, lastUnitEnd(queue.get(queue.size() - 1)));
            }
        }
        return best;
    }

    /** Every consume queue's files in offset order (consumequeue/<topic>/<queueId>/, numeric ids only). */
    private List<List<Path>> queueFiles() {
        List<List<Path>> out = new ArrayList<>();
        if (root == null || !Files.isDirectory(root.resolve(CONSUME_QUEUE_DIR))) {
            return out;
        }
        Path cq = root.resolve(CONSUME_QUEUE_DIR);
        for (String topic : list(cq)) {
            Path td = cq.resolve(topic);
            if (!Files.isDirectory(td)) {
                continue;
            }
            for (String qid : list(td)) {
                Path qd = td.resolve(qid);
                if (qid.matches("[0-9]+") && Files.isDirectory(qd)) {
                    out.add(list(qd).stream().filter(StoreSnapshot::isDataFileName).map(qd::resolve).toList());
                }
            }
        }
        return out;
    }

    /** Commitlog end of the last valid unit of a consume-queue file (units are a prefix; -1 none). */
    private static long lastUnitEnd(Path file) {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            ByteBuffer v = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
            int lo = 0;
            int hi = (int) (ch.size() / CQ_UNIT_SIZE);
            while (lo < hi) {
                int mid = (lo + hi) >>> 1;
                long phy = v.getLong(mid * CQ_UNIT_SIZE + CQ_PHYOFFSET);
                int size = v.getInt(mid * CQ_UNIT_SIZE + CQ_SIZE);
                if (size > 0 && phy >= 0) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            if (lo == 0) {
                return -1;
            }
            long phy = v.getLong((lo - 1) * CQ_UNIT_SIZE + CQ_PHYOFFSET);
            int size = v.getInt((lo - 1) * CQ_UNIT_SIZE + CQ_SIZE);
            return size == CQ_FILLER_SIZE ? -1 : phy + size;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The splits of one read, in commitlog order (mqcore/spark/plan.py without the consume-queue path). */
    List<CommitLogSplit> plan(ReadOptions opts) {
        List<CommitLogSplit> out = new ArrayList<>();
        if (opts.isEmpty()) {
            return out;
        }
        for (int i = 0; i < files.size(); i++) {
            DataFile f = files.get(i);
            long limit = dataEnd(i);
            long lo = Math.max(0, opts.minOffset - f.baseOffset);
            long hi = opts.maxOffset < Long.MAX_VALUE ? Math.min(limit, opts.maxOffset - f.baseOffset) : limit;
            if (lo >= hi || !timeOverlaps(i, opts)) {
                continue;
            }
            if (opts.splitSize <= 0 || hi - lo <= opts.splitSize) {
                out.add(new CommitLogSplit(f.path, f.baseOffset, lo, hi, limit, lo == 0));
                continue;
            }
            for (long s = lo; s < hi; s += opts.splitSize) {
                out.add(new CommitLogSplit(f.path, f.baseOffset, s, Math.min(hi, s + opts.splitSize), limit,
                        s == 0));
            }
        }
        return out;
    }

    /** Store times grow along the commitlog: file i holds times in [firstTs[i], firstTs[i+1]] (+ slack). */
    private boolean timeOverlaps(int i, ReadOptions opts) {
        if (opts.minStoreTs == Long.MIN_VALUE && opts.maxStoreTs == Long.MAX_VALUE) {
            return true;
        }
        long lo = firstTs.get(i);
        long hi = i + 1 < firstTs.size() ? firstTs.get(i + 1) : -1;
        if (lo >= 0 && lo - opts.timeSlackMs > opts.maxStoreTs) {
            return false;
        }
        return !(hi >= 0 && hi + opts.timeSlackMs < opts.minStoreTs);
    }
}
