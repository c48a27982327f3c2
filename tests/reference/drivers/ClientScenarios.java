import java.nio.charset.StandardCharsets;
import java.text.SimpleDateFormat;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.exception.RequestTimeoutException;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;
import org.apache.rocketmq.common.protocol.header.UpdateConsumerOffsetRequestHeader;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.common.protocol.route.TopicRouteData;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;

/**
 * Scenarios of the official RocketMQ 4.9.8 Java client against one broker (mqbroker or the Java
 * broker), several per JVM launch. args: namesrv prefix scenario...
 * Each scenario prints "RESULT <name> OK <facts>" or "RESULT <name> FAIL <why>"; facts are
 * key=value words the Python test asserts or compares between the two brokers.
 * No setVipChannelEnabled call: the 4.9.8 default (false) is what users run.
 */
public class ClientScenarios {
    static String ns;
    static String prefix;
    static final long WAIT_MS = 30_000;

    public static void main(String[] args) throws Exception {
        ns = args[0];
        prefix = args[1];
        for (int i = 2; i < args.length; i++) {
            String name = args[i];
            long t0 = System.currentTimeMillis();
            try {
                String facts = run(name);
                System.out.println("RESULT " + name + " OK " + facts + " ms=" + (System.currentTimeMillis() - t0));
            } catch (Throwable e) {
                String why = String.valueOf(e).replace('\n', ' ');
                System.out.println("RESULT " + name + " FAIL " + why);
                e.printStackTrace(System.out);
            }
            System.out.flush();
        }
        System.exit(0);
    }

    static String run(String name) throws Exception {
        switch (name) {
            case "produce": return produce();
            case "ordered": return ordered();
            case "compressed": return compressed();
            case "query": return query();
            case "delay": return delay();
            case "tags": return tags();
            case "orderly": return orderly();
            case "broadcast": return broadcast();
            case "rebalance": return rebalance();
            case "litepull": return litePull();
            case "retry_dlq": return retryDlq();
            case "resume": return resume();
            case "consume_from": return consumeFrom();
            case "sql": return sql();
            case "sql_refused": return sqlRefused();
            case "request_roundtrip": return requestRoundtrip();
            case "request_timeout": return requestTimeout();
            case "request_only": return requestOnly();
            case "past_end": return pastEnd();
            default: throw new IllegalArgumentException("unknown scenario " + name);
        }
    }

    // --- helpers ---------------------------------------------------------------------------------
    static DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(prefix + group);
        p.setNamesrvAddr(ns);
        p.setInstanceName(prefix + group);
        p.setSendMsgTimeout(15_000);  // a loaded 2-core CI machine, not a slow broker
        p.start();
        return p;
    }

    static DefaultMQPushConsumer pushConsumer(String group, String instance) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(prefix + group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(prefix + instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return c;
    }

    static Message msg(String topic, String tag, String key, String body) {
        return new Message(topic, tag, key, body.getBytes(StandardCharsets.UTF_8));
    }

    static String body(Message m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static void await(CountDownLatch latch, String what) throws InterruptedException {
        check(latch.await(WAIT_MS, TimeUnit.MILLISECONDS), "timed out waiting for " + what + " (" + latch.getCount() + " left)");
    }

    /** Waits until the name server routes `topic`: a consumer started before that learns the
     * route only at its next 30 s poll (and checks its subscription with no broker at all). */
    static void awaitRoute(DefaultMQProducer p, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (true) {
            try {
                p.getDefaultMQProducerImpl().getmQClientFactory().getMQClientAPIImpl().getTopicRouteInfoFromNameServer(topic, 3000);
                return;
            } catch (Exception notYet) {
                check(System.currentTimeMillis() < deadline, "no route for " + topic + ": " + notYet);
                Thread.sleep(100);
            }
        }
    }

    /** Waits until the consumer owns `n` queues (locked ones, for an orderly consumer). */
    static int awaitQueues(DefaultMQPushConsumer c, String topic, int n, boolean locked) throws InterruptedException {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        int owned = 0;
        while (System.currentTimeMillis() < deadline) {
            owned = 0;
            for (Map.Entry<MessageQueue, org.apache.rocketmq.client.impl.consumer.ProcessQueue> e
                : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet()) {
                // the table also holds %RETRY%group's queue: count the topic's own
                if (e.getKey().getTopic().equals(topic) && !e.getValue().isDropped() && (!locked || e.getValue().isLocked())) {
                    owned++;
                }
            }
            if (owned == n) {
                return owned;
            }
            Thread.sleep(100);
        }
        throw new AssertionError("the consumer owns " + owned + " queues, not " + n);
    }

    /** Waits until `n` of the consumer's queues of `topic` have been seen dropped: what the
     * client does with a queue whose pull was answered PULL_OFFSET_MOVED, 10 s before it gives
     * the queue up (the first pull may come before or after the consumer's start returns). */
    static void awaitMoved(DefaultMQPushConsumer c, String topic, int n) throws InterruptedException {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        Set<Integer> moved = new HashSet<>();
        while (System.currentTimeMillis() < deadline) {
            for (Map.Entry<MessageQueue, org.apache.rocketmq.client.impl.consumer.ProcessQueue> e
                : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet()) {
                if (e.getKey().getTopic().equals(topic) && e.getValue().isDropped()) {
                    moved.add(e.getKey().getQueueId());
                }
            }
            if (moved.size() == n) {
                return;
            }
            Thread.sleep(20);
        }
        throw new AssertionError(moved.size() + " of " + n + " queues were answered PULL_OFFSET_MOVED");
    }

    /** Waits until the consumer's offsets (in memory) add up to `total`: what it consumed is
     * acknowledged, so a shutdown now commits all of it. */
    static void awaitOffsets(DefaultMQPushConsumer c, long total) throws InterruptedException {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        long sum = 0;
        while (System.currentTimeMillis() < deadline) {
            sum = 0;
            for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
                sum += Math.max(0, c.getDefaultMQPushConsumerImpl().getOffsetStore().readOffset(mq,
                    org.apache.rocketmq.client.consumer.store.ReadOffsetType.READ_FROM_MEMORY));
            }
            if (sum >= total) {
                return;
            }
            Thread.sleep(50);
        }
        throw new AssertionError("consumer offsets add up to " + sum + ", not " + total);
    }

    /** One message per queue of the topic, after everything else: a consumer that received all
     * of them has read every queue to its end, so a wrongly filtered message would have shown. */
    static void sendSentinels(DefaultMQProducer p, String topic, String tag, String key, String value) throws Exception {
        for (MessageQueue mq : p.fetchPublishMessageQueues(topic)) {
            Message m = msg(topic, tag, "end", "end-" + mq.getQueueId());
            m.putUserProperty(key, value);
            p.send(m, mq);
        }
    }

    /** Sends n messages "topic-i" with tag and key k-i; returns the results. */
    static List<SendResult> sendN(DefaultMQProducer p, String topic, String tag, int n) throws Exception {
        List<SendResult> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            SendResult r = p.send(msg(topic, tag, "k-" + i, topic + "-" + i));
            check(r.getSendStatus() == SendStatus.SEND_OK, "send status " + r.getSendStatus());
            out.add(r);
        }
        return out;
    }

    /** A push consumer that records bodies until `expect` arrived; waits for them. */
    static Set<String> consumeAll(String group, String topic, String expr, int expect) throws Exception {
        Set<String> got = ConcurrentHashMap.newKeySet();
        CountDownLatch latch = new CountDownLatch(expect);
        DefaultMQPushConsumer c = pushConsumer(group, group);
        c.subscribe(topic, expr);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (got.add(body(m))) {
                    latch.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            await(latch, group);
            awaitOffsets(c, expect);
        } finally {
            c.shutdown();
        }
        return got;
    }

    // --- producer --------------------------------------------------------------------------------
    /** sync, async, oneway and batch sends to a topic the send auto-creates; one consumer reads all. */
    static String produce() throws Exception {
        String topic = prefix + "Produce";
        DefaultMQProducer p = producer("pg-produce");
        try {
            sendN(p, topic, "sync", 10);
            CountDownLatch acked = new CountDownLatch(10);
            AtomicInteger asyncErrors = new AtomicInteger();
            for (int i = 0; i < 10; i++) {
                p.send(msg(topic, "async", "a-" + i, "async-" + i), new SendCallback() {
                    public void onSuccess(SendResult r) { acked.countDown(); }
                    public void onException(Throwable e) { asyncErrors.incrementAndGet(); acked.countDown(); }
                });
            }
            await(acked, "async acks");
            check(asyncErrors.get() == 0, asyncErrors.get() + " async sends failed");
            for (int i = 0; i < 5; i++) {
                p.sendOneway(msg(topic, "oneway", "o-" + i, "oneway-" + i));
            }
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                batch.add(msg(topic, "batch", "b-" + i, "batch-" + i));
            }
            SendResult br = p.send(batch);
            check(br.getSendStatus() == SendStatus.SEND_OK, "batch " + br.getSendStatus());
            int queues = p.fetchPublishMessageQueues(topic).size();
            Set<String> got = consumeAll("cg-produce", topic, "*", 35);
            check(got.contains("oneway-4") && got.contains("batch-9") && got.contains("async-9"), "missing " + got);
            return "received=" + got.size() + " queues=" + queues + " batchIds=" + br.getMsgId().split(",").length;
        } finally {
            p.shutdown();
        }
    }

    /** MessageQueueSelector: every message of one order id goes to one queue, in send order. */
    static String ordered() throws Exception {
        String topic = prefix + "Ordered";
        DefaultMQProducer p = producer("pg-ordered");
        MessageQueueSelector byOrder = (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size());
        Map<Integer, Set<Integer>> queuesOfOrder = new HashMap<>();
        try {
            for (int i = 0; i < 40; i++) {
                int order = i % 4;
                SendResult r = p.send(msg(topic, "o", "o" + order, order + ":" + i), byOrder, order);
                queuesOfOrder.computeIfAbsent(order, k -> new HashSet<>()).add(r.getMessageQueue().getQueueId());
            }
        } finally {
            p.shutdown();
        }
        for (Set<Integer> q : queuesOfOrder.values()) {
            check(q.size() == 1, "an order id spread over queues " + queuesOfOrder);
        }
        // an orderly consumer sees each order's messages in send order
        Map<String, List<Integer>> seen = new ConcurrentHashMap<>();
        CountDownLatch latch = new CountDownLatch(40);
        DefaultMQPushConsumer c = pushConsumer("cg-ordered", "cg-ordered");
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String[] parts = body(m).split(":");
                seen.computeIfAbsent(parts[0], k -> Collections.synchronizedList(new ArrayList<>())).add(Integer.parseInt(parts[1]));
                latch.countDown();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        try {
            await(latch, "ordered messages");
        } finally {
            c.shutdown();
        }
        for (List<Integer> l : seen.values()) {
            List<Integer> sorted = new ArrayList<>(l);
            Collections.sort(sorted);
            check(sorted.equals(l), "out of order: " + l);
        }
        return "orders=" + seen.size();
    }

    /** A body above compressMsgBodyOverHowmuch (4 KiB) is stored compressed and read back whole. */
    static String compressed() throws Exception {
        String topic = prefix + "Compressed";
        StringBuilder sb = new StringBuilder();
        while (sb.length() < 64 * 1024) {
            sb.append("compressible text ").append(sb.length()).append(' ');
        }
        String big = sb.toString();
        DefaultMQProducer p = producer("pg-compressed");
        try {
            p.send(msg(topic, "big", "big", big));
            p.send(msg(topic, "small", "small", "small"));
        } finally {
            p.shutdown();
        }
        Map<String, Integer> sysFlags = new ConcurrentHashMap<>();
        Map<String, String> bodies = new ConcurrentHashMap<>();
        CountDownLatch latch = new CountDownLatch(2);
        DefaultMQPushConsumer c = pushConsumer("cg-compressed", "cg-compressed");
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (bodies.putIfAbsent(m.getTags(), body(m)) == null) {
                    sysFlags.put(m.getTags(), m.getSysFlag());
                    latch.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            await(latch, "compressed messages");
        } finally {
            c.shutdown();
        }
        check(big.equals(bodies.get("big")), "big body differs");
        check((sysFlags.get("big") & 0x1) == 1, "big body not stored compressed: sysFlag " + sysFlags.get("big"));
        check((sysFlags.get("small") & 0x1) == 0, "small body compressed");
        return "bigBytes=" + big.length();
    }

    /** keys and user properties reach the consumer; queryMessage by key and viewMessage by id. */
    static String query() throws Exception {
        String topic = prefix + "Query";
        DefaultMQProducer p = producer("pg-query");
        try {
            Message m = msg(topic, "q", "order-42 order-43", "query-body");
            m.putUserProperty("color", "blue");
            m.putUserProperty("size", "7");
            long begin = System.currentTimeMillis() - 60_000;
            SendResult r = p.send(m);
            MessageExt viewed = p.viewMessage(r.getOffsetMsgId());
            check("query-body".equals(body(viewed)), "viewMessage body " + body(viewed));
            check("blue".equals(viewed.getUserProperty("color")), "viewMessage lost user property");
            MessageExt byUniq = p.viewMessage(topic, r.getMsgId());
            check("query-body".equals(body(byUniq)), "viewMessage by unique key");
            QueryResult qr = null;
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (System.currentTimeMillis() < deadline) {  // the index lags the append on the Java broker
                qr = p.queryMessage(topic, "order-43", 32, begin, System.currentTimeMillis() + 60_000);
                if (!qr.getMessageList().isEmpty()) {
                    break;
                }
                Thread.sleep(200);
            }
            check(qr != null && qr.getMessageList().size() == 1, "queryMessage found " + (qr == null ? null : qr.getMessageList()));
            MessageExt q = qr.getMessageList().get(0);
            check("7".equals(q.getUserProperty("size")) && "order-42 order-43".equals(q.getKeys()), "query lost properties");
            Set<String> got = ConcurrentHashMap.newKeySet();
            CountDownLatch latch = new CountDownLatch(1);
            DefaultMQPushConsumer c = pushConsumer("cg-query", "cg-query");
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt x : msgs) {
                    got.add(x.getKeys() + "|" + x.getUserProperty("color") + "|" + x.getUserProperty("size") + "|" + x.getTags());
                    latch.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            try {
                await(latch, "query consumer");
            } finally {
                c.shutdown();
            }
            check(got.contains("order-42 order-43|blue|7|q"), "consumer saw " + got);
            return "found=" + qr.getMessageList().size();
        } finally {
            p.shutdown();
        }
    }

    /** Delay level 1 (1 s): delivered no sooner, with the properties a 4.9 consumer sees. */
    static String delay() throws Exception {
        String topic = prefix + "Delay";
        DefaultMQProducer p = producer("pg-delay");
        long sentAt;
        try {
            Message m = msg(topic, "d", "delay-key", "delayed");
            m.setDelayTimeLevel(1);
            m.putUserProperty("color", "green");
            sentAt = System.currentTimeMillis();
            p.send(m);
        } finally {
            p.shutdown();
        }
        AtomicReference<MessageExt> got = new AtomicReference<>();
        AtomicLong at = new AtomicLong();
        CountDownLatch latch = new CountDownLatch(1);
        DefaultMQPushConsumer c = pushConsumer("cg-delay", "cg-delay");
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            if (got.compareAndSet(null, msgs.get(0))) {
                at.set(System.currentTimeMillis());
                latch.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            await(latch, "delayed message");
        } finally {
            c.shutdown();
        }
        MessageExt m = got.get();
        check(at.get() - sentAt >= 900, "delivered after " + (at.get() - sentAt) + " ms");
        check(m.getStoreTimestamp() - m.getBornTimestamp() >= 900, "stored too early");
        TreeMap<String, String> props = new TreeMap<>(m.getProperties());
        // the facts the two brokers must agree on: which properties a consumer sees
        return "delay=" + props.get("DELAY") + " realTopic=" + (props.get("REAL_TOPIC") != null)
            + " realQid=" + (props.get("REAL_QID") != null) + " color=" + props.get("color")
            + " keys=" + props.keySet().toString().replace(" ", "");
    }

    // --- consumers -------------------------------------------------------------------------------
    /** A push consumer with "TagA || TagB" receives exactly those tags. */
    static String tags() throws Exception {
        String topic = prefix + "Tags";
        DefaultMQProducer p = producer("pg-tags");
        try {
            for (String tag : new String[] {"TagA", "TagB", "TagC"}) {
                for (int i = 0; i < 5; i++) {
                    p.send(msg(topic, tag, tag + i, tag + "-" + i));
                }
            }
            sendSentinels(p, topic, "TagA", "end", "yes");
        } finally {
            p.shutdown();
        }
        Set<String> got = ConcurrentHashMap.newKeySet();
        CountDownLatch latch = new CountDownLatch(14);
        DefaultMQPushConsumer c = pushConsumer("cg-tags", "cg-tags");
        c.subscribe(topic, "TagA || TagB");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.add(m.getTags() + ":" + body(m));
                latch.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            await(latch, "tagged messages and the four sentinels");
        } finally {
            c.shutdown();
        }
        for (String s : got) {
            check(!s.startsWith("TagC"), "TagC delivered: " + s);
        }
        check(got.size() == 14, "got " + got);
        return "received=" + got.size();
    }

    /** Two orderly instances of one group: queue locks split the queues, each queue is
     * consumed by one instance at a time and in order. */
    static String orderly() throws Exception {
        String topic = prefix + "Orderly";
        DefaultMQProducer p = producer("pg-orderly");
        MessageQueueSelector byQueue = (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size());
        try {
            p.send(msg(topic, "o", "warm", "-1:-1"), byQueue, 0);  // create the topic (4 queues)
            awaitRoute(p, topic);
        } finally {
            p.shutdown();
        }
        Map<String, List<Integer>> seen = new ConcurrentHashMap<>();
        Map<String, Set<String>> consumersOfQueue = new ConcurrentHashMap<>();
        AtomicInteger concurrent = new AtomicInteger();
        AtomicInteger overlap = new AtomicInteger();
        Map<Integer, AtomicInteger> busy = new ConcurrentHashMap<>();
        CountDownLatch latch = new CountDownLatch(81);
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (String inst : new String[] {"orderly-1", "orderly-2"}) {
            DefaultMQPushConsumer c = pushConsumer("cg-orderly", inst);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                int q = ctx.getMessageQueue().getQueueId();
                if (busy.computeIfAbsent(q, k -> new AtomicInteger()).incrementAndGet() > 1) {
                    overlap.incrementAndGet();
                }
                try {
                    for (MessageExt m : msgs) {
                        String[] parts = body(m).split(":");
                        seen.computeIfAbsent(parts[0], k -> Collections.synchronizedList(new ArrayList<>())).add(Integer.parseInt(parts[1]));
                        consumersOfQueue.computeIfAbsent(parts[0], k -> ConcurrentHashMap.newKeySet()).add(inst);
                        latch.countDown();
                    }
                    Thread.sleep(5);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } finally {
                    busy.get(q).decrementAndGet();
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
            cs.add(c);
        }
        cs.get(0).start();
        cs.get(1).start();
        try {
            // a queue that changes owner stays locked by the old one for up to 20 s: send once
            // the split is settled, so the test measures ordering, not the unlock delay
            awaitQueues(cs.get(0), topic, 2, true);
            awaitQueues(cs.get(1), topic, 2, true);
            DefaultMQProducer p2 = producer("pg-orderly");
            try {
                for (int i = 0; i < 80; i++) {
                    p2.send(msg(topic, "o", "k" + i, (i % 4) + ":" + i), byQueue, i % 4);
                }
            } finally {
                p2.shutdown();
            }
            await(latch, "orderly messages");
        } finally {
            cs.get(1).shutdown();
            cs.get(0).shutdown();
        }
        for (Map.Entry<String, List<Integer>> e : seen.entrySet()) {
            if (e.getKey().equals("-1")) {
                continue;
            }
            List<Integer> sorted = new ArrayList<>(e.getValue());
            Collections.sort(sorted);
            check(sorted.equals(e.getValue()), "queue " + e.getKey() + " out of order: " + e.getValue());
        }
        check(overlap.get() == 0, overlap.get() + " overlapping consumptions of one queue");
        Set<String> instances = new HashSet<>();
        consumersOfQueue.values().forEach(instances::addAll);
        return "queues=" + seen.size() + " instances=" + instances.size();
    }

    /** BROADCASTING: each of two instances receives every message. */
    static String broadcast() throws Exception {
        String topic = prefix + "Broadcast";
        DefaultMQProducer p = producer("pg-broadcast");
        p.send(msg(topic, "w", "w", "warm"));  // create the topic before the consumers start
        awaitRoute(p, topic);
        Map<String, Set<String>> got = new ConcurrentHashMap<>();
        CountDownLatch latch = new CountDownLatch(2 * 20);
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        try {
            for (String inst : new String[] {"bc-1", "bc-2"}) {
                DefaultMQPushConsumer c = pushConsumer("cg-broadcast", inst);
                c.setMessageModel(MessageModel.BROADCASTING);
                c.subscribe(topic, "*");
                Set<String> mine = got.computeIfAbsent(inst, k -> ConcurrentHashMap.newKeySet());
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        if (body(m).startsWith("bc-") && mine.add(body(m))) {
                            latch.countDown();
                        }
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                cs.add(c);
            }
            awaitQueues(cs.get(0), topic, 4, false);
            awaitQueues(cs.get(1), topic, 4, false);
            for (int i = 0; i < 20; i++) {
                p.send(msg(topic, "b", "b" + i, "bc-" + i));
            }
            await(latch, "broadcast messages");
        } finally {
            for (DefaultMQPushConsumer c : cs) {
                c.shutdown();
            }
            p.shutdown();
        }
        return "each=" + got.get("bc-1").size() + "," + got.get("bc-2").size();
    }

    /** CLUSTERING: two instances share the queues; when one leaves, the other takes them all. */
    static String rebalance() throws Exception {
        String topic = prefix + "Rebalance";
        DefaultMQProducer p = producer("pg-rebalance");
        p.send(msg(topic, "w", "w", "warm"));
        awaitRoute(p, topic);
        Map<String, Set<String>> got = new ConcurrentHashMap<>();
        Map<String, String> secondBy = new ConcurrentHashMap<>();
        Set<String> all = ConcurrentHashMap.newKeySet();
        CountDownLatch first = new CountDownLatch(40);
        CountDownLatch second = new CountDownLatch(40);
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        try {
            for (String inst : new String[] {"rb-1", "rb-2"}) {
                DefaultMQPushConsumer c = pushConsumer("cg-rebalance", inst);
                c.subscribe(topic, "*");
                Set<String> mine = got.computeIfAbsent(inst, k -> ConcurrentHashMap.newKeySet());
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        mine.add(body(m));
                        if (body(m).startsWith("two-")) {
                            secondBy.merge(body(m), inst, (a, b) -> a + "+" + b);
                        }
                        if (all.add(body(m))) {
                            if (body(m).startsWith("one-")) {
                                first.countDown();
                            } else if (body(m).startsWith("two-")) {
                                second.countDown();
                            }
                        }
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                cs.add(c);
            }
            // both must own queues before the first round, or the split proves nothing
            awaitQueues(cs.get(0), topic, 2, false);
            awaitQueues(cs.get(1), topic, 2, false);
            for (int i = 0; i < 40; i++) {
                p.send(msg(topic, "r", "r" + i, "one-" + i));
            }
            await(first, "first round");
            int splitA = got.get("rb-1").size(), splitB = got.get("rb-2").size();
            cs.get(1).shutdown();  // leaves: unregisters, the broker tells rb-1 to rebalance
            awaitQueues(cs.get(0), topic, 4, false);
            for (int i = 0; i < 40; i++) {
                p.send(msg(topic, "r", "r" + i, "two-" + i));
            }
            await(second, "second round");
            // at least once: a message may come twice during the hand-over, but only to rb-1
            long afterLeave = secondBy.values().stream().filter(v -> v.replace("rb-1", "").replace("+", "").isEmpty()).count();
            check(splitA > 0 && splitB > 0, "first round not shared: " + splitA + "/" + splitB);
            check(afterLeave == 40, "the remaining instance got " + afterLeave + " of 40: " + secondBy);
            return "split=" + (splitA > 0 && splitB > 0) + " afterLeave=" + afterLeave;
        } finally {
            cs.get(0).shutdown();
            p.shutdown();
        }
    }

    /** DefaultLitePullConsumer in subscribe mode and in assign mode (with seek). */
    static String litePull() throws Exception {
        String topic = prefix + "LitePull";
        DefaultMQProducer p = producer("pg-litepull");
        try {
            sendN(p, topic, "lp", 20);
        } finally {
            p.shutdown();
        }
        DefaultLitePullConsumer sub = new DefaultLitePullConsumer(prefix + "cg-lite-sub");
        sub.setNamesrvAddr(ns);
        sub.setInstanceName(prefix + "lite-sub");
        sub.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        sub.subscribe(topic, "*");
        sub.start();
        Set<String> got = new HashSet<>();
        try {
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (got.size() < 20 && System.currentTimeMillis() < deadline) {
                for (MessageExt m : sub.poll(1000)) {
                    got.add(body(m));
                }
            }
        } finally {
            sub.shutdown();
        }
        check(got.size() == 20, "subscribe mode got " + got.size());
        DefaultLitePullConsumer asg = new DefaultLitePullConsumer(prefix + "cg-lite-assign");
        asg.setNamesrvAddr(ns);
        asg.setInstanceName(prefix + "lite-assign");
        asg.setAutoCommit(false);
        asg.start();
        Set<String> assigned = new HashSet<>();
        int queueCount;
        try {
            List<MessageQueue> mqs = new ArrayList<>(asg.fetchMessageQueues(topic));
            queueCount = mqs.size();
            asg.assign(mqs);
            for (MessageQueue mq : mqs) {
                asg.seek(mq, 0);
            }
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (assigned.size() < 20 && System.currentTimeMillis() < deadline) {
                for (MessageExt m : asg.poll(1000)) {
                    assigned.add(body(m));
                }
            }
            asg.commitSync();
        } finally {
            asg.shutdown();
        }
        check(assigned.size() == 20, "assign mode got " + assigned.size());
        return "subscribe=" + got.size() + " assign=" + assigned.size() + " queues=" + queueCount;
    }

    /** RECONSUME_LATER with maxReconsumeTimes=2 and 1 s retries: three deliveries with
     * reconsumeTimes 0, 1, 2, then the message is in %DLQ%group. */
    static String retryDlq() throws Exception {
        String topic = prefix + "Retry";
        String group = "cg-retry";
        DefaultMQProducer p = producer("pg-retry");
        List<Integer> times = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch latch = new CountDownLatch(3);
        DefaultMQPushConsumer c = pushConsumer(group, group);
        c.setMaxReconsumeTimes(2);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (body(m).equals("retry-me")) {
                    times.add(m.getReconsumeTimes());
                    latch.countDown();
                }
            }
            ctx.setDelayLevelWhenNextConsume(1);
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        try {
            p.send(msg(topic, "r", "retry-key", "retry-me"));
            c.start();
            await(latch, "three deliveries");
            QueryResult dlq = null;
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (System.currentTimeMillis() < deadline) {
                try {
                    dlq = p.queryMessage(MixAll_DLQ + prefix + group, "retry-key", 8, 0, System.currentTimeMillis() + 60_000);
                    if (!dlq.getMessageList().isEmpty()) {
                        break;
                    }
                } catch (Exception notYet) {
                    // the DLQ topic's route appears once the broker registered it
                }
                Thread.sleep(300);
            }
            check(dlq != null && dlq.getMessageList().size() == 1, "not in the DLQ");
            MessageExt dead = dlq.getMessageList().get(0);
            Thread.sleep(1500);  // no fourth delivery
            return "reconsumeTimes=" + times.toString().replace(" ", "") + " dlqBody=" + body(dead)
                + " dlqReconsumeTimes=" + dead.getReconsumeTimes() + " dlqDelay=" + dead.getProperty("DELAY")
                + " dlqRetryTopic=" + (dead.getProperty("RETRY_TOPIC") != null);
        } finally {
            c.shutdown();
            p.shutdown();
        }
    }

    static final String MixAll_DLQ = "%DLQ%";

    /** A clustering consumer that restarts resumes from its committed offsets. */
    static String resume() throws Exception {
        String topic = prefix + "Resume";
        DefaultMQProducer p = producer("pg-resume");
        try {
            for (int i = 0; i < 20; i++) {
                p.send(msg(topic, "r", "r" + i, "first-" + i));
            }
            Set<String> one = consumeAll("cg-resume", topic, "*", 20);
            for (int i = 0; i < 10; i++) {
                p.send(msg(topic, "r", "r" + i, "second-" + i));
            }
            // FIRST_OFFSET: without committed offsets it would read the first 20 again
            Set<String> got = ConcurrentHashMap.newKeySet();
            CountDownLatch latch = new CountDownLatch(10);
            DefaultMQPushConsumer c = pushConsumer("cg-resume", "cg-resume-2");
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    got.add(body(m));
                    if (body(m).startsWith("second-")) {
                        latch.countDown();
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            try {
                await(latch, "second round");
                awaitOffsets(c, 30);
            } finally {
                c.shutdown();
            }
            long again = got.stream().filter(s -> s.startsWith("first-")).count();
            check(again == 0, again + " messages consumed twice");
            return "first=" + one.size() + " second=" + got.size();
        } finally {
            p.shutdown();
        }
    }

    /** New groups with CONSUME_FROM_FIRST_OFFSET / LAST_OFFSET / TIMESTAMP on a topic with
     * history: the counts each sees are compared between the two brokers. */
    static String consumeFrom() throws Exception {
        String topic = prefix + "From";
        DefaultMQProducer p = producer("pg-from");
        String stamp;
        try {
            for (int i = 0; i < 10; i++) {
                p.send(msg(topic, "f", "f" + i, "old-" + i));
            }
            awaitRoute(p, topic);
            Thread.sleep(1100);
            stamp = new SimpleDateFormat("yyyyMMddHHmmss").format(new Date());
            Thread.sleep(1100);
            StringBuilder out = new StringBuilder();
            int sent = 0;
            for (ConsumeFromWhere where : new ConsumeFromWhere[] {ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, ConsumeFromWhere.CONSUME_FROM_TIMESTAMP}) {
                Set<String> got = ConcurrentHashMap.newKeySet();
                CountDownLatch newOne = new CountDownLatch(1);
                DefaultMQPushConsumer c = pushConsumer("cg-from-" + where.name(), "from-" + where.name());
                c.setConsumeFromWhere(where);
                c.setConsumeTimestamp(stamp);
                c.subscribe(topic, "*");
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        got.add(body(m));
                        if (body(m).equals("new-" + where.name())) {
                            newOne.countDown();
                        }
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                try {
                    awaitQueues(c, topic, 4, false);
                    p.send(msg(topic, "f", "new", "new-" + where.name()));
                    await(newOne, "new message for " + where);
                    awaitOffsets(c, 10 + ++sent);  // read to the end of every queue before counting
                } finally {
                    c.shutdown();
                }
                long old = got.stream().filter(s -> s.startsWith("old-")).count();
                out.append(where.name().replace("CONSUME_FROM_", "")).append("=").append(old).append(' ');
            }
            return out.toString().trim();
        } finally {
            p.shutdown();
        }
    }

    /** A group whose committed offsets lie past the end of its queues (a store restored from an
     * older copy, a queue recreated): the broker's PULL_OFFSET_MOVED names where to go on, the
     * client persists that offset and takes the queue again (about 10 s later, as the Java
     * client waits); the group must then get the new messages and none of the old ones. */
    static String pastEnd() throws Exception {
        String topic = prefix + "PastEnd";
        String group = prefix + "cg-pastend";
        DefaultMQProducer p = producer("pg-pastend");
        try {
            for (int i = 0; i < 8; i++) {
                p.send(msg(topic, "o", "o" + i, "old-" + i));
            }
            awaitRoute(p, topic);
            MQClientAPIImpl api = p.getDefaultMQProducerImpl().getmQClientFactory().getMQClientAPIImpl();
            TopicRouteData route = api.getTopicRouteInfoFromNameServer(topic, 3000);
            String addr = null;
            for (BrokerData bd : route.getBrokerDatas()) {
                addr = bd.getBrokerAddrs().get(0L);
            }
            List<MessageQueue> queues = p.fetchPublishMessageQueues(topic);
            for (MessageQueue mq : queues) {
                UpdateConsumerOffsetRequestHeader h = new UpdateConsumerOffsetRequestHeader();
                h.setConsumerGroup(group);
                h.setTopic(topic);
                h.setQueueId(mq.getQueueId());
                h.setCommitOffset(1000L);
                api.updateConsumerOffset(addr, h, 5000);
            }
            Set<String> got = ConcurrentHashMap.newKeySet();
            CountDownLatch news = new CountDownLatch(queues.size());
            DefaultMQPushConsumer c = pushConsumer("cg-pastend", "cg-pastend");
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    if (got.add(body(m)) && body(m).startsWith("new-")) {
                        news.countDown();
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            try {
                // the new messages go in only once every queue has had its PULL_OFFSET_MOVED
                // answer (the client marks the queue dropped then, for 10 s): a pull answered
                // after them would name the max offset past them, and they would never arrive
                awaitMoved(c, topic, queues.size());
                for (MessageQueue mq : queues) {
                    p.send(msg(topic, "n", "n", "new-" + mq.getQueueId()), mq);
                }
                // the client gives a moved queue up 10 s after the answer and takes it back at its
                // next rebalance (every 20 s): asked for here, so the wait is the 10 s only
                long deadline = System.currentTimeMillis() + 2 * WAIT_MS;
                while (news.getCount() > 0 && System.currentTimeMillis() < deadline) {
                    c.getDefaultMQPushConsumerImpl().doRebalance();
                    news.await(500, TimeUnit.MILLISECONDS);
                }
                check(news.getCount() == 0, "timed out waiting for the new messages (" + news.getCount() + " left)");
            } finally {
                c.shutdown();
            }
            long old = got.stream().filter(s -> s.startsWith("old-")).count();
            return "old=" + old + " new=" + (got.size() - old);
        } finally {
            p.shutdown();
        }
    }

    /** A SQL92 push subscription receives exactly the matching messages. */
    static String sql() throws Exception {
        String topic = prefix + "Sql";
        DefaultMQProducer p = producer("pg-sql");
        try {
            for (int i = 0; i < 20; i++) {
                Message m = msg(topic, i % 2 == 0 ? "even" : "odd", "s" + i, "sql-" + i);
                m.putUserProperty("a", String.valueOf(i));
                p.send(m);
            }
            sendSentinels(p, topic, "end", "end", "yes");
        } finally {
            p.shutdown();
        }
        Set<String> got = ConcurrentHashMap.newKeySet();
        CountDownLatch latch = new CountDownLatch(9);
        DefaultMQPushConsumer c = pushConsumer("cg-sql", "cg-sql");
        c.subscribe(topic, MessageSelector.bySql("(a BETWEEN 5 AND 14 AND TAGS = 'odd') OR end = 'yes'"));
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.add(body(m));
                latch.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            await(latch, "sql matches and the four sentinels");
        } finally {
            c.shutdown();
        }
        got.removeIf(b -> b.startsWith("end-"));
        check(got.equals(new HashSet<>(Arrays.asList("sql-5", "sql-7", "sql-9", "sql-11", "sql-13"))), "got " + got);
        return "received=" + got.size();
    }

    /** A consumer with a bad SQL92 expression (or any SQL92 when the broker's property filter
     * is off) fails to start, naming the reason, instead of receiving unfiltered messages. */
    static String sqlRefused() throws Exception {
        String topic = prefix + "SqlBad";
        DefaultMQProducer p = producer("pg-sqlbad");
        try {
            p.send(msg(topic, "x", "x", "x"));
            awaitRoute(p, topic);
        } finally {
            p.shutdown();
        }
        DefaultMQPushConsumer c = pushConsumer("cg-sqlbad", "cg-sqlbad");
        c.subscribe(topic, MessageSelector.bySql("a > 'text'"));
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        try {
            c.start();
        } catch (Exception e) {
            String why = String.valueOf(e.getMessage()).split("\n")[0];
            java.util.regex.Matcher code = java.util.regex.Pattern.compile("CODE: (\\d+)", java.util.regex.Pattern.CASE_INSENSITIVE).matcher(why);
            return "refused=true code=" + (code.find() ? code.group(1) : "none") + " why=" + why.replace(' ', '_');
        } finally {
            c.shutdown();
        }
        return "refused=false";
    }

    // --- request-reply (DefaultMQProducer.request) ----------------------------------------------------
    // request_roundtrip: a Java push consumer answers with MessageUtil.createReplyMessage; three
    // requests get their replies. request_timeout: nobody answers, RequestTimeoutException after
    // the timeout. request_only: requests on <prefix>RpcPy, answered by someone else (mqcore.client).
    static String requestRoundtrip() throws Exception {
        String topic = prefix + "RpcJava";
        DefaultMQProducer replier = producer("replier");
        DefaultMQProducer requester = producer("requester");
        // the replier's send creates the topic: the requester's first request then finds no cached
        // route and heartbeats before sending (DefaultMQProducerImpl.prepareSendRequest), so the
        // broker knows it when the reply comes; after a send of its own it would wait for the 1 s tick
        replier.send(new Message(topic, "warm".getBytes(StandardCharsets.UTF_8)));
        AtomicInteger replyErrors = new AtomicInteger();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(prefix + "rpc-consumer");
        c.setNamesrvAddr(ns);
        c.setInstanceName(prefix + "rpc-consumer");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (m.getProperty(MessageConst.PROPERTY_CORRELATION_ID) == null) {
                    continue;  // the warm-up message
                }
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("re:" + body(m)).getBytes(StandardCharsets.UTF_8));
                    replier.send(reply, 10_000);
                } catch (Exception e) {
                    replyErrors.incrementAndGet();
                    e.printStackTrace(System.out);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            List<String> bodies = new ArrayList<>();
            String replyTopic = null;
            String ttl = null;
            boolean sameCorrelation = true;
            long deadline = System.currentTimeMillis() + 60_000;
            for (int i = 0; i < 3; i++) {
                Message[] request = new Message[1];
                Message reply = requestUntilAnswered(requester, topic, "q" + i, deadline, request);
                bodies.add(body(reply));
                replyTopic = reply.getTopic();
                ttl = reply.getProperty(MessageConst.PROPERTY_MESSAGE_TTL);
                sameCorrelation &= request[0].getProperty(MessageConst.PROPERTY_CORRELATION_ID)
                    .equals(reply.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
            }
            return "replies=" + String.join(",", bodies) + " replyTopic=" + replyTopic + " ttl=" + ttl
                + " sameCorrelation=" + sameCorrelation + " replyErrors=" + replyErrors.get();
        } finally {
            c.shutdown();
            requester.shutdown();
            replier.shutdown();
        }
    }

    static String requestTimeout() throws Exception {
        String topic = prefix + "RpcNobody";
        DefaultMQProducer requester = producer("lonely");
        try {
            requester.send(new Message(topic, "warm".getBytes(StandardCharsets.UTF_8)));
            long t0 = System.currentTimeMillis();
            try {
                requester.request(new Message(topic, "anyone?".getBytes(StandardCharsets.UTF_8)), 1_500);
                return "timedOut=false";
            } catch (RequestTimeoutException e) {
                long waited = System.currentTimeMillis() - t0;
                return "timedOut=true waitedOk=" + (waited >= 1_400 && waited < 5_000)
                    + " errorCode=" + e.getResponseCode();
            }
        } finally {
            requester.shutdown();
        }
    }

    static String requestOnly() throws Exception {
        String topic = prefix + "RpcPy";
        DefaultMQProducer requester = producer("java-requester");
        try {
            List<String> bodies = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60_000;
            for (int i = 0; i < 3; i++) {
                bodies.add(body(requestUntilAnswered(requester, topic, "j" + i, deadline, new Message[1])));
            }
            return "replies=" + String.join(",", bodies);
        } finally {
            requester.shutdown();
        }
    }

    /** A request of `body` to `topic`, asked again (as a new request) while nobody answers within
     * 5 s, until `deadline`: a replier's first rebalance may still be on its way. `sent[0]` is the
     * request that was answered. */
    static Message requestUntilAnswered(DefaultMQProducer requester, String topic, String body, long deadline,
                                        Message[] sent) throws Exception {
        while (true) {
            sent[0] = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
            try {
                return requester.request(sent[0], 5_000);
            } catch (RequestTimeoutException notYet) {
                check(System.currentTimeMillis() < deadline, "no reply within 60 s: " + notYet);
            }
        }
    }
}
