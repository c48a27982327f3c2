// The official Java client's async send with a bound on the requests in flight, timed:
//   java -cp <client jars>:<classes> AsyncSendBench <namesrv> <topic> <messages> <body bytes> <in flight>
// Prints one line: RESULT seconds=<wall> cpu_seconds=<this JVM's CPU> ok=<n> failed=<n>
// (bench/bench_reference.py compiles it on first use and runs it against both brokers).
import java.lang.management.ManagementFactory;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public class AsyncSendBench {
    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime();
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        int n = Integer.parseInt(args[2]), size = Integer.parseInt(args[3]), inflight = Integer.parseInt(args[4]);
        byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'x');
        DefaultMQProducer producer = new DefaultMQProducer("bench-async-" + System.nanoTime());
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(60_000);
        producer.setCompressMsgBodyOverHowmuch(1 << 30);  // the body as given, as the other workloads
        producer.start();
        try {
            producer.send(new Message(topic, body));  // route lookup, topic creation, connection: not timed
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
            double seconds = (System.nanoTime() - t0) / 1e9, cpu = (cpuNanos() - cpu0) / 1e9;
            System.out.println("RESULT seconds=" + seconds + " cpu_seconds=" + cpu + " ok=" + ok.get()
                               + " failed=" + failed.get());
        } finally {
            producer.shutdown();
        }
    }
}
