// The official Java client (4.9.8) driven the way its users drive it, timed:
//   java -cp <client jars>:<classes> JavaClientBench async   <namesrv> <topic> <messages> <body bytes> <in flight>
//   java -cp <client jars>:<classes> JavaClientBench sync    <namesrv> <topic> <messages> <body bytes>
//   java -cp <client jars>:<classes> JavaClientBench consume <namesrv> <topic> <messages> <group>
// async: send(msg, callback) with at most <in flight> requests outstanding (one message per request);
// sync: send(msg) one at a time; consume: a push consumer (clustering, default settings, from the
// first offset) receives <messages> already stored messages, then shuts down (which commits offsets).
// Prints one line: RESULT seconds=<wall> cpu_seconds=<this JVM's CPU> ok=<n> failed=<n>
// (bench/bench_reference.py compiles it on first use and runs it against both brokers).
import java.lang.management.ManagementFactory;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class JavaClientBench {
    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime();
    }

    private static void result(long t0, long cpu0, long ok, long failed) {
        double seconds = (System.nanoTime() - t0) / 1e9, cpu = (cpuNanos() - cpu0) / 1e9;
        System.out.println("RESULT seconds=" + seconds + " cpu_seconds=" + cpu + " ok=" + ok + " failed=" + failed);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], namesrv = args[1], topic = args[2];
        int n = Integer.parseInt(args[3]);
        if (mode.equals("consume")) {
            consume(namesrv, topic, n, args[4]);
            return;
        }
        byte[] body = new byte[Integer.parseInt(args[4])];
        java.util.Arrays.fill(body, (byte) 'x');
        DefaultMQProducer producer = new DefaultMQProducer("bench-" + mode + "-" + System.nanoTime());
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(60_000);
        producer.setCompressMsgBodyOverHowmuch(1 << 30);  // the body as given, as the other workloads
        producer.start();
        try {
            producer.send(new Message(topic, body));  // route lookup, topic creation, connection: not timed
            if (mode.equals("sync")) {
                long ok = 0, failed = 0, cpu0 = cpuNanos(), t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    if (producer.send(new Message(topic, body)).getSendStatus() == SendStatus.SEND_OK) {
                        ok++;
                    } else {
                        failed++;
                    }
                }
                result(t0, cpu0, ok, failed);
                return;
            }
            int inflight = Integer.parseInt(args[5]);
            Semaphore slots = new Semaphore(inflight);
            CountDownLatch done = new CountDownLatch(n);
            AtomicLong ok = new AtomicLong(), failed = new AtomicLong();
            long cpu0 = cpuNanos(), t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                slots.acquire();
                producer.send(new Message(topic, body), new SendCallback() {
                    public void onSuccess(SendResult r) {
                        (r.getSendStatus() == SendStatus.SEND_OK ? ok : failed).incrementAndGet();
                        slots.release();
                        done.countDown();
                    }
                    public void onException(Throwable e) {
                        failed.incrementAndGet();
                        slots.release();
                        done.countDown();
                    }
                });
            }
            if (!done.await(600, TimeUnit.SECONDS)) {
                System.out.println("RESULT timeout ok=" + ok.get() + " failed=" + failed.get());
                return;
            }
            result(t0, cpu0, ok.get(), failed.get());
        } finally {
            producer.shutdown();
        }
    }

    private static void consume(String namesrv, String topic, int n, String group) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        CountDownLatch done = new CountDownLatch(1);
        AtomicLong received = new AtomicLong();
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                if (received.addAndGet(msgs.size()) >= n) {
                    done.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        long cpu0 = cpuNanos(), t0 = System.nanoTime();
        consumer.start();
        try {
            if (!done.await(600, TimeUnit.SECONDS)) {
                System.out.println("RESULT timeout ok=" + received.get() + " failed=0");
                return;
            }
        } finally {
            consumer.shutdown();  // persists the consumed offsets to the broker
        }
        result(t0, cpu0, received.get(), 0);
    }
}
