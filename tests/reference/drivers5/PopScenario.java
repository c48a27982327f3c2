// RocketMQ 5's pop consumption over remoting with the official 5.x remoting client
// (org.apache.rocketmq:rocketmq-client 5.3.3, MQClientAPIImpl, as the 5.x proxy uses it):
//   java -cp '<5.3.3 lib>/*' PopScenario.java NAMESRV BROKER_ADDR BROKER_NAME TOPIC GROUP
// Sends p-0..p-3 to queue 0, pops them (invisible 3 s), acks p-1 alone and p-2 and p-3 in one
// batch, changes p-0's invisible time to 1 s, pops again (long polling) and gets p-0 back from
// the group's retry queue, acks it, and finds nothing more. Prints RESULT lines (JSON) the test
// compares between brokers; a failure prints RESULT {"error": ...} and exits 2.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ChangeInvisibleTimeRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;

public class PopScenario {
    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static String ns, addr, brokerName, topic, group;
    static MQClientAPIImpl api;

    static PopResult pop(long invisibleMs, long pollMs) throws Exception {
        PopMessageRequestHeader h = new PopMessageRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(topic);
        h.setQueueId(-1);
        h.setMaxMsgNums(32);
        h.setInvisibleTime(invisibleMs);
        h.setPollTime(pollMs);
        h.setBornTime(System.currentTimeMillis());
        h.setInitMode(0);
        h.setExpType("TAG");
        h.setExp("*");
        CompletableFuture<PopResult> f = new CompletableFuture<>();
        api.popMessageAsync(brokerName, addr, h, pollMs + 5000, new PopCallback() {
            public void onSuccess(PopResult r) { f.complete(r); }
            public void onException(Throwable e) { f.completeExceptionally(e); }
        });
        return f.get(pollMs + 10000, TimeUnit.MILLISECONDS);
    }

    static AckCallback callback(CompletableFuture<AckResult> f) {
        return new AckCallback() {
            public void onSuccess(AckResult r) { f.complete(r); }
            public void onException(Throwable e) { f.completeExceptionally(e); }
        };
    }

    static String realTopic(MessageExt m) {
        return ExtraInfoUtil.getRealTopic(ExtraInfoUtil.split(m.getProperty(MessageConst.PROPERTY_POP_CK)), topic, group);
    }

    static AckResult ack(MessageExt m) throws Exception {
        String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
        AckMessageRequestHeader h = new AckMessageRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(realTopic(m));
        h.setQueueId(m.getQueueId());
        h.setExtraInfo(ck);
        h.setOffset(m.getQueueOffset());
        CompletableFuture<AckResult> f = new CompletableFuture<>();
        api.ackMessageAsync(addr, 5000, callback(f), h);
        return f.get(10, TimeUnit.SECONDS);
    }

    static void print(String step, PopResult r) {
        StringBuilder sb = new StringBuilder("RESULT {\"step\": " + q(step) + ", \"status\": " + q(r.getPopStatus().name()) + ", \"messages\": [");
        List<MessageExt> ms = r.getMsgFoundList() == null ? List.of() : r.getMsgFoundList();
        for (int i = 0; i < ms.size(); i++) {
            MessageExt m = ms.get(i);
            String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
            String[] f = ExtraInfoUtil.split(ck);
            sb.append(i > 0 ? ", " : "").append("{\"body\": ").append(q(new String(m.getBody(), StandardCharsets.UTF_8)))
                .append(", \"topic\": ").append(q(m.getTopic())).append(", \"reconsume\": ").append(m.getReconsumeTimes())
                .append(", \"real_topic\": ").append(q(realTopic(m))).append(", \"ck_fields\": ").append(f.length)
                .append(", \"ck_type\": ").append(q(ExtraInfoUtil.getRetry(f)))
                .append(", \"ck_invisible\": ").append(ExtraInfoUtil.getInvisibleTime(f))
                .append(", \"ck_offset_ok\": ").append(ExtraInfoUtil.getQueueOffset(f) == m.getQueueOffset())
                .append(", \"first_pop_time\": ").append(m.getProperty(MessageConst.PROPERTY_FIRST_POP_TIME) != null)
                .append("}");
        }
        System.out.println(sb.append("]}"));
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        ns = args[0]; addr = args[1]; brokerName = args[2]; topic = args[3]; group = args[4];
        try {
            DefaultMQProducer producer = new DefaultMQProducer("PopScenarioProducer");
            producer.setNamesrvAddr(ns);
            producer.setVipChannelEnabled(false);
            producer.start();
            MessageQueueSelector first = (mqs, msg, arg) -> mqs.get(0);
            for (int i = 0; i < 4; i++) {
                producer.send(new Message(topic, ("p-" + i).getBytes(StandardCharsets.UTF_8)), first, null);
            }
            producer.shutdown();

            ClientConfig cc = new ClientConfig();
            cc.setNamesrvAddr(ns);
            cc.setInstanceName("PopScenario");
            MQClientInstance instance = MQClientManager.getInstance().getOrCreateMQClientInstance(cc);
            instance.start();
            api = instance.getMQClientAPIImpl();

            List<MessageExt> got = new ArrayList<>();
            PopResult r = null;
            for (int tries = 0; tries < 10 && got.size() < 4; tries++) {
                r = pop(3000, 2000);
                if (r.getMsgFoundList() != null) got.addAll(r.getMsgFoundList());
            }
            got.sort((a, b) -> Long.compare(a.getQueueOffset(), b.getQueueOffset()));
            PopResult all = new PopResult(r.getPopStatus(), got);
            print("pop", all);
            print("pop-again", pop(3000, 0));

            System.out.println("RESULT {\"step\": \"ack-p-1\", \"status\": " + q(ack(got.get(1)).getStatus().name()) + "}");
            List<String> batch = List.of(got.get(2).getProperty(MessageConst.PROPERTY_POP_CK),
                                         got.get(3).getProperty(MessageConst.PROPERTY_POP_CK));
            CompletableFuture<AckResult> bf = new CompletableFuture<>();
            api.batchAckMessageAsync(addr, 5000, callback(bf), topic, group, batch);
            System.out.println("RESULT {\"step\": \"batch-ack\", \"status\": " + q(bf.get(10, TimeUnit.SECONDS).getStatus().name()) + "}");

            MessageExt m0 = got.get(0);
            ChangeInvisibleTimeRequestHeader ch = new ChangeInvisibleTimeRequestHeader();
            ch.setConsumerGroup(group);
            ch.setTopic(realTopic(m0));
            ch.setQueueId(m0.getQueueId());
            ch.setExtraInfo(m0.getProperty(MessageConst.PROPERTY_POP_CK));
            ch.setOffset(Long.valueOf(m0.getQueueOffset()));
            ch.setInvisibleTime(1000L);
            CompletableFuture<AckResult> cf = new CompletableFuture<>();
            api.changeInvisibleTimeAsync(brokerName, addr, ch, 5000, callback(cf));
            AckResult changed = cf.get(10, TimeUnit.SECONDS);
            System.out.println("RESULT {\"step\": \"change\", \"status\": " + q(changed.getStatus().name())
                + ", \"extra_fields\": " + ExtraInfoUtil.split(changed.getExtraInfo()).length + "}");

            // p-0 comes back once its (new) invisible time is over: from the retry queue, a second delivery
            List<MessageExt> back = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60000;
            while (back.isEmpty() && System.currentTimeMillis() < deadline) {
                PopResult again = pop(3000, 5000);
                if (again.getMsgFoundList() != null) back.addAll(again.getMsgFoundList());
            }
            print("revived", new PopResult(org.apache.rocketmq.client.consumer.PopStatus.FOUND, back));
            for (MessageExt m : back) {
                System.out.println("RESULT {\"step\": \"ack-revived\", \"status\": " + q(ack(m).getStatus().name()) + "}");
            }
            print("after", pop(3000, 4000));
            instance.shutdown();
        } catch (Exception e) {
            e.printStackTrace();
            System.out.println("RESULT {\"error\": " + q(String.valueOf(e)) + "}");
            System.exit(2);
        }
        System.exit(0);
    }
}
