import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The official 4.9.8 Java client with a namespace (ClientConfig.setNamespace).
 * args: namesrv namespace topic group produce N  - sends N messages "java-<i>", prints
 *       "SENT <topic of the result's queue>" for each;
 *       namesrv namespace topic group consume N  - a push consumer from the first offset, prints
 *       "GOT <msg.getTopic()> <body>" per message until N arrived, then "DONE".
 */
public class NamespaceScenario {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], namespace = args[1], topic = args[2], group = args[3], mode = args[4];
        int n = Integer.parseInt(args[5]);
        if (mode.equals("produce")) {
            DefaultMQProducer p = new DefaultMQProducer(namespace, group);
            p.setNamesrvAddr(namesrv);
            p.setVipChannelEnabled(false);
            p.start();
            for (int i = 0; i < n; i++) {
                SendResult r = p.send(new Message(topic, ("java-" + i).getBytes("UTF-8")));
                System.out.println("SENT " + r.getMessageQueue().getTopic());
            }
            p.shutdown();
            System.out.println("DONE");
            return;
        }
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(namespace, group);
        c.setNamesrvAddr(namesrv);
        c.setVipChannelEnabled(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.add(m.getTopic() + " " + new String(m.getBody()));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        while (got.size() < n && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        for (String line : got) {
            System.out.println("GOT " + line);
        }
        c.shutdown();
        System.out.println(got.size() >= n ? "DONE" : "TIMEOUT");
    }
}
