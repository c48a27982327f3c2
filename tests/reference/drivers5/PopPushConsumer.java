// The official 5.x remoting push consumer in POP mode (org.apache.rocketmq:rocketmq-client 5.3.3):
//   java -cp '<5.3.3 lib>/*' PopPushConsumer.java NAMESRV BROKER_ADDR TOPIC GROUP N SHARE
// As Apache's example PopPushConsumer: creates TOPIC (4 queues) on BROKER_ADDR and sets GROUP's
// mode for it to POP with popShareQueueNum SHARE through DefaultMQAdminExt.setMessageRequestMode
// (SET_MESSAGE_REQUEST_MODE), sends m-0..m-(N-1), then starts a DefaultMQPushConsumer with
// setClientRebalance(false): it asks the broker for its queues (QUERY_ASSIGNMENT) and pops them.
// The listener fails m-1 once (RECONSUME_LATER: the client changes its invisible time) and takes
// everything else. Prints one RESULT line (JSON) once all N are consumed and m-1 came back, or
// RESULT {"error": ...} and exits 2.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class PopPushConsumer {
    static final String FAIL_ONCE = "m-1";

    public static void main(String[] args) throws Exception {
        String ns = args[0], addr = args[1], topic = args[2], group = args[3];
        int n = Integer.parseInt(args[4]), share = Integer.parseInt(args[5]);
        try {
            System.out.println("RESULT " + run(ns, addr, topic, group, n, share));
            System.exit(0);
        } catch (Throwable e) {
            System.out.println("RESULT {\"error\": \"" + String.valueOf(e).replace("\"", "'") + "\"}");
            e.printStackTrace(System.out);
            System.exit(2);
        }
    }

    static String run(String ns, String addr, String topic, String group, int n, int share) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(ns);
        admin.setInstanceName("pop-admin-" + System.nanoTime());
        admin.start();
        admin.createAndUpdateTopicConfig(addr, new TopicConfig(topic, 4, 4));
        admin.setMessageRequestMode(addr, topic, group, MessageRequestMode.POP, share, 5000);
        admin.shutdown();

        DefaultMQProducer producer = new DefaultMQProducer("PopPushProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("pop-producer-" + System.nanoTime());
        producer.start();
        long until = System.currentTimeMillis() + 60_000;
        for (int i = 0; i < n; i++) {
            Message m = new Message(topic, "TagA", ("m-" + i).getBytes(StandardCharsets.UTF_8));
            while (true) {  // the route may need a moment after the topic is created
                try {
                    if (producer.send(m).getSendStatus() == SendStatus.SEND_OK) break;
                } catch (Exception e) {
                    if (System.currentTimeMillis() > until) throw e;
                    Thread.sleep(500);
                }
            }
        }
        producer.shutdown();

        Map<String, List<Integer>> deliveries = new ConcurrentHashMap<>();  // body -> reconsume times seen
        Map<String, Boolean> popped = new ConcurrentHashMap<>();  // body -> every delivery had a POP_CK
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("pop-consumer-" + System.nanoTime());
        consumer.setClientRebalance(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                deliveries.computeIfAbsent(body, k -> Collections.synchronizedList(new ArrayList<>()))
                    .add(msg.getReconsumeTimes());
                popped.merge(body, msg.getProperty(MessageConst.PROPERTY_POP_CK) != null, Boolean::logicalAnd);
            }
            if (msgs.size() == 1 && FAIL_ONCE.equals(new String(msgs.get(0).getBody(), StandardCharsets.UTF_8))
                && msgs.get(0).getReconsumeTimes() == 0) {
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.setConsumeMessageBatchMaxSize(1);
        consumer.start();
        long deadline = System.currentTimeMillis() + 90_000;
        while (System.currentTimeMillis() < deadline
            && !(deliveries.size() >= n && deliveries.getOrDefault(FAIL_ONCE, List.of()).size() >= 2)) {
            Thread.sleep(200);
        }
        Thread.sleep(1500);  // anything delivered twice that should not be shows up here
        List<Integer> assigned = new ArrayList<>();
        for (MessageQueue mq : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getPopProcessQueueTable().keySet()) {
            if (mq.getTopic().equals(topic)) assigned.add(mq.getQueueId());
        }
        Collections.sort(assigned);
        consumer.shutdown();

        StringBuilder sb = new StringBuilder("{\"consumed\": {");
        Map<String, List<Integer>> sorted = new TreeMap<>(deliveries);
        String sep = "";
        for (Map.Entry<String, List<Integer>> e : sorted.entrySet()) {
            sb.append(sep).append('"').append(e.getKey()).append("\": ").append(e.getValue());
            sep = ", ";
        }
        boolean allPopped = !popped.isEmpty() && popped.values().stream().allMatch(b -> b);
        sb.append("}, \"all_popped\": ").append(allPopped).append(", \"pop_queues\": ").append(assigned).append('}');
        return sb.toString();
    }
}
