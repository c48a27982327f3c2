import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.atomic.AtomicInteger;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.protocol.body.ConsumerConnection;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * What Apache's DefaultMQAdminExt (rocketmq-tools 4.9.8) gets back from one broker and its name
 * server, so a test can run it against the Java broker and mqbroker and compare the shapes.
 * args: namesrv brokerAddr brokerName cluster topic group consumer
 * consumer: "java" starts a Java push consumer of group/topic in this JVM; "external" expects
 * one online already (an mqcore.client consumer the test started); "none" starts none.
 * It sends 8 messages, waits until they are consumed and the consumer's retry queue has a committed
 * offset (or 60 s), then prints one line per call:
 * "@@ name {json}" (fastjson, as the tool itself would serialise the object) or
 * "@@ name ERROR code message". The last line is "@@ done".
 */
public class AdminShapes {
    static DefaultMQAdminExt admin;

    public static void main(String[] args) throws Exception {
        String ns = args[0], brokerAddr = args[1], brokerName = args[2], cluster = args[3];
        String topic = args[4], group = args[5], consumerMode = args[6];
        admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(ns);
        admin.setInstanceName("shapes-" + System.nanoTime());
        admin.start();
        admin.createAndUpdateTopicConfig(brokerAddr, topicConfig(topic));
        AtomicInteger consumed = new AtomicInteger();
        DefaultMQPushConsumer consumer = null;
        if (consumerMode.equals("java")) {
            consumer = new DefaultMQPushConsumer(group);
            consumer.setNamesrvAddr(ns);
            consumer.setInstanceName("shapes-consumer");
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.setPersistConsumerOffsetInterval(1000);
            consumer.setPollNameServerInterval(1000); // takes its retry queue soon after the first heartbeat
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                consumed.addAndGet(msgs.size());
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
        }
        DefaultMQProducer producer = new DefaultMQProducer("shapes-producer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("shapes-producer");
        producer.start();
        SendResult last = null;
        for (int i = 0; i < 8; i++) {
            Message m = new Message(topic, "TagA", "key-" + i, ("shape " + i).getBytes(StandardCharsets.UTF_8));
            last = producer.send(m);
        }
        long deadline = System.currentTimeMillis() + 60_000;
        if (!consumerMode.equals("none")) {
            while (System.currentTimeMillis() < deadline && lag(group, topic) != 0) {
                Thread.sleep(300);
            }
        }
        Thread.sleep(1200); // one throughput sample after the last send
        String clientId = null;
        try {
            ConsumerConnection cc = admin.examineConsumerConnectionInfo(group);
            clientId = cc.getConnectionSet().iterator().next().getClientId();
        } catch (Exception e) {
            System.out.println("@@ note no consumer connection: " + e);
        }
        final String cid = clientId;
        final SendResult sent = last;
        print("examineBrokerClusterInfo", () -> admin.examineBrokerClusterInfo());
        print("fetchBrokerRuntimeStats", () -> admin.fetchBrokerRuntimeStats(brokerAddr));
        print("examineConsumeStats", () -> admin.examineConsumeStats(group));
        print("fetchTopicsByCLuster", () -> admin.fetchTopicsByCLuster(cluster));
        print("queryTopicConsumeByWho", () -> admin.queryTopicConsumeByWho(topic));
        print("queryConsumeTimeSpan", () -> admin.queryConsumeTimeSpan(topic, group));
        print("cleanExpiredConsumerQueueByAddr", () -> admin.cleanExpiredConsumerQueueByAddr(brokerAddr));
        print("viewBrokerStatsData", () -> admin.viewBrokerStatsData(brokerAddr, "TOPIC_PUT_NUMS", topic));
        print("viewBrokerStatsDataGroup", () -> admin.viewBrokerStatsData(brokerAddr, "GROUP_GET_NUMS", topic + "@" + group));
        print("viewBrokerStatsDataMissing", () -> admin.viewBrokerStatsData(brokerAddr, "TOPIC_PUT_NUMS", "no-such-topic"));
        print("fetchConsumeStatsInBroker", () -> admin.fetchConsumeStatsInBroker(brokerAddr, false, 5000));
        print("queryConsumeQueue", () -> admin.queryConsumeQueue(brokerAddr, topic, 0, 0, 5, group));
        print("queryConsumeQueueMissing", () -> admin.queryConsumeQueue(brokerAddr, "no-such-topic", 0, 0, 5, group));
        if (cid != null) {
            print("getConsumerRunningInfo", () -> admin.getConsumerRunningInfo(group, cid, false));
            print("consumeMessageDirectly", () -> admin.consumeMessageDirectly(group, cid, sent.getOffsetMsgId()));
        }
        print("getConsumerRunningInfoOffline", () -> admin.getConsumerRunningInfo(group, "127.0.0.1@nobody", false));
        print("cloneGroupOffset", () -> {
            admin.cloneGroupOffset(group, group + "-clone", topic, true);
            return admin.queryConsumeTimeSpan(topic, group + "-clone");
        });
        List<String> nss = Arrays.asList(ns.split(";"));
        print("getNameServerConfig", () -> admin.getNameServerConfig(nss));
        print("updateNameServerConfig", () -> {
            Properties p = new Properties();
            p.setProperty("orderMessageEnable", "true");
            admin.updateNameServerConfig(p, nss);
            return admin.getNameServerConfig(nss).values().iterator().next().getProperty("orderMessageEnable");
        });
        print("wipeWritePermOfBroker", () -> admin.wipeWritePermOfBroker(ns, brokerName));
        print("routeAfterWipe", () -> admin.examineTopicRouteInfo(topic).getQueueDatas());
        print("addWritePermOfBroker", () -> admin.addWritePermOfBroker(ns, brokerName));
        print("routeAfterAdd", () -> admin.examineTopicRouteInfo(topic).getQueueDatas());
        System.out.println("@@ done");
        System.out.flush();
        producer.shutdown();
        if (consumer != null) consumer.shutdown();
        admin.shutdown();
        System.exit(0);
    }

    static org.apache.rocketmq.common.TopicConfig topicConfig(String topic) {
        org.apache.rocketmq.common.TopicConfig tc = new org.apache.rocketmq.common.TopicConfig(topic);
        tc.setReadQueueNums(2);
        tc.setWriteQueueNums(2);
        return tc;
    }

    static long lag(String group, String topic) {
        try {
            ConsumeStats cs = admin.examineConsumeStats(group);
            long diff = cs.computeTotalDiff();
            // caught up, and the consumer has committed its retry queue's offset: it owns that queue too
            boolean retry = cs.getOffsetTable().keySet().stream().anyMatch(mq -> mq.getTopic().startsWith("%RETRY%"));
            return retry ? diff : -1;
        } catch (Exception e) {
            return -1;
        }
    }

    interface Call { Object call() throws Exception; }

    static void print(String name, Call c) {
        try {
            Object o = c.call();
            System.out.println("@@ " + name + " " + JSON.toJSONString(o, SerializerFeature.MapSortField));
        } catch (MQBrokerException e) {
            System.out.println("@@ " + name + " ERROR " + e.getResponseCode() + " " + String.valueOf(e.getErrorMessage()).replace('\n', ' '));
        } catch (Throwable e) {
            System.out.println("@@ " + name + " ERROR -1 " + String.valueOf(e).replace('\n', ' '));
        }
        System.out.flush();
    }
}
