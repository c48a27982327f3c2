// The official Java 5.x client (rocketmq-client-java, gRPC) driven the way its users drive it, timed:
//   java -cp <client jar>:<classes> JavaGrpcBench <endpoint> <topic> <group> <sync n> <async n> <in flight> <body bytes>
// against either mqbroker's gRPC endpoint or Apache RocketMQ's proxy, plaintext (-Dmq.ssl=true: TLS).
// Three phases on one topic, each printing one line
//   RESULT phase=<sync|async|receive> seconds=<wall> cpu_seconds=<this JVM's CPU> ok=<n> failed=<n>
// sync: Producer.send one at a time; async: Producer.sendAsync with at most <in flight> unanswered
// (the client has no window of its own); receive: a SimpleConsumer of <group> receives batches of
// up to 32 (invisible 30 s) and acks each message (ackAsync, all acks of a batch answered before
// the next receive) until it has every message the two send phases (and the untimed first send)
// stored. Client start-up (route, settings, connection) and one first send are outside the timing.
// bench/bench_grpc_java.py compiles it on first use and runs it against both brokers.
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

public class JavaGrpcBench {
    static ClientServiceProvider provider;
    static String topic;
    static byte[] body;

    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime();
    }

    private static void result(String phase, long t0, long cpu0, long ok, long failed) {
        double seconds = (System.nanoTime() - t0) / 1e9, cpu = (cpuNanos() - cpu0) / 1e9;
        System.out.println("RESULT phase=" + phase + " seconds=" + seconds + " cpu_seconds=" + cpu + " ok=" + ok
            + " failed=" + failed);
        System.out.flush();
    }

    static Message message() {
        // a new message per send, as an application builds them
        return provider.newMessageBuilder().setTopic(topic).setBody(body).build();
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0], group = args[2];
        topic = args[1];
        int syncN = Integer.parseInt(args[3]), asyncN = Integer.parseInt(args[4]), inflight = Integer.parseInt(args[5]);
        body = new byte[Integer.parseInt(args[6])];
        java.util.Arrays.fill(body, (byte) 'x');
        provider = ClientServiceProvider.loadService();
        ClientConfiguration cc = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .setRequestTimeout(Duration.ofSeconds(30)).enableSsl(Boolean.getBoolean("mq.ssl")).build();
        Producer producer = provider.newProducerBuilder().setClientConfiguration(cc).setTopics(topic).build();
        producer.send(message());  // connection and route warm: not timed
        long stored = 1;

        long ok = 0, failed = 0, cpu0 = cpuNanos(), t0 = System.nanoTime();
        for (int i = 0; i < syncN; i++) {
            try {
                producer.send(message());
                ok++;
            } catch (Exception e) {
                failed++;
            }
        }
        result("sync", t0, cpu0, ok, failed);
        stored += ok;

        Semaphore slots = new Semaphore(inflight);
        CountDownLatch done = new CountDownLatch(asyncN);
        AtomicLong aok = new AtomicLong(), afailed = new AtomicLong();
        cpu0 = cpuNanos();
        t0 = System.nanoTime();
        for (int i = 0; i < asyncN; i++) {
            slots.acquire();
            producer.sendAsync(message()).whenComplete((receipt, err) -> {
                (err == null ? aok : afailed).incrementAndGet();
                slots.release();
                done.countDown();
            });
        }
        if (!done.await(600, TimeUnit.SECONDS)) {
            System.out.println("RESULT phase=async timeout ok=" + aok.get() + " failed=" + afailed.get());
        } else {
            result("async", t0, cpu0, aok.get(), afailed.get());
        }
        stored += aok.get();
        producer.close();

        SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(cc).setConsumerGroup(group)
            .setAwaitDuration(Duration.ofSeconds(5))
            .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .build();
        long received = 0, acked = 0, ackFailed = 0;
        long deadline = System.currentTimeMillis() + 600_000;
        cpu0 = cpuNanos();
        t0 = System.nanoTime();
        while (received < stored && System.currentTimeMillis() < deadline) {
            List<MessageView> batch = consumer.receive(32, Duration.ofSeconds(30));
            received += batch.size();
            List<CompletableFuture<Void>> acks = new ArrayList<>(batch.size());
            for (MessageView mv : batch) {
                acks.add(consumer.ackAsync(mv));
            }
            for (CompletableFuture<Void> f : acks) {
                try {
                    f.get(60, TimeUnit.SECONDS);
                    acked++;
                } catch (Exception e) {
                    ackFailed++;
                }
            }
        }
        result("receive", t0, cpu0, acked, ackFailed + Math.max(0, stored - received));
        consumer.close();
        System.exit(0);
    }
}
