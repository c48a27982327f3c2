import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/** Smoke driver: sends one message with the official Java client. args: namesrv topic */
public class Hello {
    public static void main(String[] args) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("hello-pg");
        p.setNamesrvAddr(args[0]);
        p.setVipChannelEnabled(false);
        p.start();
        SendResult r = p.send(new Message(args[1], "TagA", "k1", "hello".getBytes("UTF-8")));
        System.out.println("RESULT " + r.getSendStatus() + " " + r.getMessageQueue().getQueueId());
        p.shutdown();
    }
}
