import java.security.MessageDigest;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The 5.x remoting client (rocketmq-client 5.3.3) and compressed bodies.
 * args: namesrv topic group mode [count] [type]
 *   consume: lite-pull `count` messages from the topic's start, print "BODY <sysFlag> <len> <md5>"
 *   produce: send `count` bodies of 16 KiB (compressed over 4 KiB) with compression `type`
 *            (ZLIB, LZ4, ZSTD), print "SENT <len> <md5>"
 */
public class Compression5 {
    static String md5(byte[] b) throws Exception {
        StringBuilder s = new StringBuilder();
        for (byte x : MessageDigest.getInstance("MD5").digest(b)) s.append(String.format("%02x", x));
        return s.toString();
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0], topic = args[1], group = args[2], mode = args[3];
        int count = args.length > 4 ? Integer.parseInt(args[4]) : 1;
        if (mode.equals("produce")) {
            DefaultMQProducer p = new DefaultMQProducer(group);
            p.setNamesrvAddr(ns);
            p.setVipChannelEnabled(false);
            p.setCompressType(CompressionType.valueOf(args[5]));
            p.start();
            for (int i = 0; i < count; i++) {
                byte[] body = new byte[16 * 1024];
                for (int j = 0; j < body.length; j++) body[j] = (byte) ('a' + (j * 7 + i) % 26);
                SendResult r = p.send(new Message(topic, "TagZ", body));
                System.out.println("SENT " + body.length + " " + md5(body) + " " + r.getSendStatus());
            }
            p.shutdown();
            return;
        }
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.setVipChannelEnabled(false);
        c.setConsumeFromWhere(org.apache.rocketmq.common.consumer.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.start();
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + 60_000;
        while (seen.size() < count && System.currentTimeMillis() < deadline) {
            List<MessageExt> got = c.poll(1000);
            for (MessageExt m : got) {
                if (seen.add(m.getMsgId())) {
                    System.out.println("BODY " + m.getSysFlag() + " " + m.getBody().length + " " + md5(m.getBody()));
                }
            }
        }
        c.shutdown();
    }
}
