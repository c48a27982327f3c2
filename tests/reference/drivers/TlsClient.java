import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

/**
 * Sends and consumes over whatever the JVM's -Dtls.enable says (the 4.x client's switch for TLS
 * to the name server and the brokers). args: namesrv topic count. Prints SENT n, RECEIVED n.
 */
public class TlsClient {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        DefaultMQProducer p = new DefaultMQProducer("tls-pg");
        p.setNamesrvAddr(namesrv);
        p.setVipChannelEnabled(false);
        p.setSendMsgTimeout(10000);
        p.start();
        int sent = 0;
        for (int i = 0; i < count; i++) {
            SendResult r = p.send(new Message(topic, "TagA", "k" + i, ("tls-" + i).getBytes("UTF-8")));
            if (r.getSendStatus().name().equals("SEND_OK")) sent++;
        }
        System.out.println("SENT " + sent);
        p.shutdown();
        CountDownLatch all = new CountDownLatch(count);
        AtomicInteger got = new AtomicInteger();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("tls-cg");
        c.setNamesrvAddr(namesrv);
        c.setVipChannelEnabled(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (int i = 0; i < msgs.size(); i++) {
                got.incrementAndGet();
                all.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        all.await(60, TimeUnit.SECONDS);
        System.out.println("RECEIVED " + got.get());
        c.shutdown();
    }
}
