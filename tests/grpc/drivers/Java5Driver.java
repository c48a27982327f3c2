// The official RocketMQ 5.x Java client (rocketmq-client-java) against mqbroker's gRPC endpoint:
//   java -cp rocketmq-client-java.jar Java5Driver.java ENDPOINT TOPIC GROUP
// A producer sends a normal message (tag, keys, property), two FIFO messages of one message
// group and a message due 2 s later, then -Dmq.bulk=N more normal messages ("bulk-<i>"); a push
// consumer of GROUP consumes them, and listens -Dmq.settleMs more for copies. -Dmq.ssl=true
// keeps the client's default (TLS); -Dmq.ak/-Dmq.sk sign the requests (5.x ACL); -Dmq.failOnce=BODY
// ("true": "normal") makes the listener answer FAILURE to the first delivery of that body (it must come back
// after the client's backoff, its RESULT line says "failed": true); -Dmq.simple=true consumes with a
// simple consumer instead (receive, invisible 10 s; "normal" is not acked the first time, so it
// comes back when its invisible time is over). Prints RESULT
// lines the test reads; a refused start prints RESULT {"error": ...} and exits 2.
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

public class Java5Driver {
    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static String line(MessageView mv, boolean failed) {
        ByteBuffer b = mv.getBody();
        byte[] raw = new byte[b.remaining()];
        b.get(raw);
        return "RESULT {\"id\": " + q(mv.getMessageId().toString()) + ", \"body\": " + q(new String(raw, StandardCharsets.UTF_8))
            + ", \"tag\": " + q(mv.getTag().orElse(null)) + ", \"attempt\": " + mv.getDeliveryAttempt()
            + ", \"group\": " + q(mv.getMessageGroup().orElse(null))
            + ", \"received_ms\": " + System.currentTimeMillis() + (failed ? ", \"failed\": true" : "") + "}";
    }

    static boolean simple(ClientServiceProvider provider, ClientConfiguration cc, String topic, String group, int want)
            throws Exception {
        SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(cc).setConsumerGroup(group)
            .setAwaitDuration(Duration.ofSeconds(5))
            .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .build();
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        int acked = 0;
        long deadline = System.currentTimeMillis() + 90_000;
        while (acked < want && System.currentTimeMillis() < deadline) {
            for (MessageView mv : consumer.receive(16, Duration.ofSeconds(10))) {
                ByteBuffer b = mv.getBody().duplicate();
                byte[] raw = new byte[b.remaining()];
                b.get(raw);
                boolean skip = new String(raw, StandardCharsets.UTF_8).equals("normal")
                    && seen.merge(mv.getMessageId().toString(), 1, Integer::sum) == 1;
                System.out.println(line(mv, skip));
                System.out.flush();
                if (!skip) {
                    consumer.ack(mv);
                    acked++;
                }
            }
        }
        consumer.close();
        System.out.println("RESULT {\"all_consumed\": " + (acked == want) + "}");
        return acked == want;
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0], topic = args[1], group = args[2];
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        int bulk = Integer.getInteger("mq.bulk", 0);
        var ccb = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .setRequestTimeout(Duration.ofSeconds(30)).enableSsl(Boolean.getBoolean("mq.ssl"));
        if (System.getProperty("mq.ak") != null) {
            ccb.setCredentialProvider(new StaticSessionCredentialsProvider(System.getProperty("mq.ak"), System.getProperty("mq.sk")));
        }
        ClientConfiguration cc = ccb.build();
        Producer producer;
        try {
            producer = provider.newProducerBuilder().setClientConfiguration(cc).setTopics(topic).build();
        } catch (Exception e) {
            e.printStackTrace();  // the cause (a refused route, a TLS failure) goes to stderr
            System.out.println("RESULT {\"error\": " + q(String.valueOf(e)) + "}");
            System.exit(2);
            return;
        }
        List<Message> messages = new ArrayList<>(List.of(
            provider.newMessageBuilder().setTopic(topic).setTag("TagJ").setKeys("jk1", "jk2")
                .addProperty("lang", "java").setBody("normal".getBytes(StandardCharsets.UTF_8)).build(),
            provider.newMessageBuilder().setTopic(topic).setMessageGroup("jgroup")
                .setBody("fifo-0".getBytes(StandardCharsets.UTF_8)).build(),
            provider.newMessageBuilder().setTopic(topic).setMessageGroup("jgroup")
                .setBody("fifo-1".getBytes(StandardCharsets.UTF_8)).build(),
            provider.newMessageBuilder().setTopic(topic).setDeliveryTimestamp(System.currentTimeMillis() + 2000)
                .setBody("later".getBytes(StandardCharsets.UTF_8)).build()));
        for (int i = 0; i < bulk; i++) {
            messages.add(provider.newMessageBuilder().setTopic(topic).setBody(("bulk-" + i).getBytes(StandardCharsets.UTF_8)).build());
        }
        for (Message m : messages) {
            System.out.println("RESULT {\"message_id\": " + q(producer.send(m).getMessageId().toString()) + "}");
        }
        producer.close();

        if (Boolean.getBoolean("mq.simple")) {
            System.exit(simple(provider, cc, topic, group, messages.size()) ? 0 : 1);
        }
        Map<String, Integer> attempts = new ConcurrentHashMap<>();
        String failBody = System.getProperty("mq.failOnce", "");
        String failOnce = failBody.equals("true") ? "normal" : failBody;
        CountDownLatch done = new CountDownLatch(messages.size());
        PushConsumer consumer = provider.newPushConsumerBuilder().setClientConfiguration(cc).setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setMessageListener((MessageView mv) -> {
                ByteBuffer b = mv.getBody();
                byte[] raw = new byte[b.remaining()];
                b.get(raw);
                String body = new String(raw, StandardCharsets.UTF_8);
                boolean fail = body.equals(failOnce) && attempts.merge(body, 1, Integer::sum) == 1;
                StringBuilder props = new StringBuilder("{");
                mv.getProperties().forEach((k, v) -> props.append(props.length() > 1 ? ", " : "").append(q(k)).append(": ").append(q(v)));
                props.append("}");
                System.out.println("RESULT {\"id\": " + q(mv.getMessageId().toString()) + ", \"body\": " + q(body)
                    + ", \"tag\": " + q(mv.getTag().orElse(null)) + ", \"keys\": " + mv.getKeys().stream().sorted().map(Java5Driver::q).toList()
                    + ", \"props\": " + props + ", \"attempt\": " + mv.getDeliveryAttempt()
                    + ", \"group\": " + q(mv.getMessageGroup().orElse(null))
                    + ", \"delivery_ts\": " + mv.getDeliveryTimestamp().orElse(0L)
                    + ", \"received_ms\": " + System.currentTimeMillis() + (fail ? ", \"failed\": true" : "") + "}");
                System.out.flush();
                if (fail) {
                    return ConsumeResult.FAILURE;
                }
                done.countDown();
                return ConsumeResult.SUCCESS;
            }).build();
        boolean all = done.await(60, TimeUnit.SECONDS);
        // copies of an acked message would come now: listen a little longer before closing
        Thread.sleep(Long.getLong("mq.settleMs", 0L));
        consumer.close();
        System.out.println("RESULT {\"all_consumed\": " + all + "}");
        System.exit(all ? 0 : 1);
    }
}
