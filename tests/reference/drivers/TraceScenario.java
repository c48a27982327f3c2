import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

/**
 * Message trace with the official 4.9.8 Java client: a producer and push consumers created
 * with enableMsgTrace=true, so their trace dispatchers write Pub / SubBefore / SubAfter
 * records to RMQ_SYS_TRACE_TOPIC. args: namesrv topic producerGroup consumerGroup...
 * Prints "MSGID <client msgId>" after the send and "CONSUMED" once every group consumed it;
 * the clients then keep running (their trace dispatchers send the records in the background)
 * until a line on stdin, then shut down and print "DONE". A trace still queued when its client
 * shuts down can be lost (the dispatcher's producer stops under it), so the test reads the
 * traces before it lets them stop.
 */
public class TraceScenario {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        DefaultMQProducer producer = new DefaultMQProducer(args[2], true);
        producer.setNamesrvAddr(namesrv);
        producer.setVipChannelEnabled(false);
        producer.start();
        SendResult sent = producer.send(new Message(topic, "TagT", "trace-key", "traced".getBytes("UTF-8")));
        System.out.println("MSGID " + sent.getMsgId());
        System.out.flush();

        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        CountDownLatch consumed = new CountDownLatch(args.length - 3);
        for (int i = 3; i < args.length; i++) {
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(args[i], true);
            c.setNamesrvAddr(namesrv);
            c.setVipChannelEnabled(false);
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.subscribe(topic, "*");
            final boolean[] once = {false};
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                synchronized (once) {
                    if (!once[0] && msgs.get(0).getMsgId().equals(sent.getMsgId())) {
                        once[0] = true;
                        consumed.countDown();
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            consumers.add(c);
        }
        if (!consumed.await(90, TimeUnit.SECONDS)) {
            System.out.println("TIMEOUT " + consumed.getCount() + " group(s) never consumed it");
            System.exit(1);
        }
        System.out.println("CONSUMED");
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
        for (DefaultMQPushConsumer c : consumers) {
            c.shutdown();
        }
        producer.shutdown();
        System.out.println("DONE");
    }
}
