import java.util.*;
import java.util.concurrent.*;
import java.lang.reflect.Method;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Timer messages with the official Java remoting client, 4.9.8 or 5.x (the 5.x calls -
 * setDeliverTimeMs, getRecallHandle, recallMessage - are made by reflection so one source runs
 * with both). args: namesrv topic how count delayMs [recallIndex]
 *   how: deliver (5.x setDeliverTimeMs) | delaysec (TIMER_DELAY_SEC property) | bad:<NAME>=<VALUE>
 * Prints SENT i dueMs handle, RECALL code, ERR code remark, GOT body arrivalMs storeTs props, DONE n.
 */
public class TimerScenarios {
    public static void main(String[] a) {
        try {
            run(a);
            System.exit(0);
        } catch (Throwable t) {
            t.printStackTrace();
            System.out.println("FAILED " + t);
            System.exit(2);  // the client's threads would keep the JVM alive
        }
    }

    /** A new topic's first send can fail while the broker creates it and registers the route. */
    static void warmup(DefaultMQProducer p, String topic) throws Exception {
        for (int t = 0; ; t++) {
            try {
                p.send(new Message(topic, "warmup".getBytes("UTF-8")));
                return;
            } catch (Exception e) {
                if (t == 10) throw e;
                Thread.sleep(1000);
            }
        }
    }

    static void run(String[] a) throws Exception {
        String ns = a[0], topic = a[1], how = a[2];
        int count = Integer.parseInt(a[3]);
        long delayMs = Long.parseLong(a[4]);
        int recallIndex = a.length > 5 ? Integer.parseInt(a[5]) : -1;
        DefaultMQProducer p = new DefaultMQProducer("PG_TIMER");
        p.setNamesrvAddr(ns);
        p.setVipChannelEnabled(false);
        p.setSendMsgTimeout(15000);  // a loaded CI machine
        p.start();
        if (how.startsWith("bad:")) {
            warmup(p, topic);
            String[] kv = how.substring(4).split("=", 2);
            Message m = new Message(topic, "x".getBytes("UTF-8"));
            MessageAccessor.putProperty(m, kv[0], kv[1]);
            try {
                SendResult r = p.send(m);
                System.out.println("SENT 0 0 " + r.getSendStatus());
            } catch (MQBrokerException e) {
                System.out.println("ERR " + e.getResponseCode() + " " + e.getErrorMessage());
            }
            p.send(new Message(topic, "plain".getBytes("UTF-8")));
            p.shutdown();
            System.out.println("DONE 0");
            return;
        }
        // the topic exists before the consumer starts (its route is fetched at start)
        warmup(p, topic);
        Map<String, String> handles = new HashMap<>();
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "TagT", "key" + i, ("t" + i).getBytes("UTF-8"));
            long due = System.currentTimeMillis() + delayMs;
            if (how.equals("deliver")) {
                Method set = Message.class.getMethod("setDeliverTimeMs", long.class);
                set.invoke(m, due);
            } else {
                long sec = (delayMs + 999) / 1000;
                due = System.currentTimeMillis() + sec * 1000;
                MessageAccessor.putProperty(m, "TIMER_DELAY_SEC", String.valueOf(sec));
            }
            SendResult r = p.send(m);
            String handle = "-";
            try {
                Object h = SendResult.class.getMethod("getRecallHandle").invoke(r);
                if (h != null) handle = h.toString();
            } catch (NoSuchMethodException e) { /* 4.9.8 */ }
            handles.put("t" + i, handle);
            System.out.println("SENT t" + i + " " + due + " " + handle);
        }
        int expect = count;
        if (recallIndex >= 0) {
            String h = handles.get("t" + recallIndex);
            try {
                Method rm = DefaultMQProducer.class.getMethod("recallMessage", String.class, String.class);
                Object id = rm.invoke(p, topic, h);
                System.out.println("RECALL 0 " + id);
                expect--;
            } catch (java.lang.reflect.InvocationTargetException e) {
                Throwable c = e.getCause();
                System.out.println("RECALL " + (c instanceof MQBrokerException ? ((MQBrokerException) c).getResponseCode() : -1)
                    + " " + c);
            }
            try {  // a handle of a message that does not exist, and a malformed one
                Method rm = DefaultMQProducer.class.getMethod("recallMessage", String.class, String.class);
                rm.invoke(p, topic, "bm90IGEgaGFuZGxl");
            } catch (java.lang.reflect.InvocationTargetException e) {
                Throwable c = e.getCause();
                System.out.println("RECALLBAD " + (c instanceof MQBrokerException ? ((MQBrokerException) c).getResponseCode() : -1));
            }
        }
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("CG_TIMER");
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "TagT");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                StringBuilder sb = new StringBuilder();
                sb.append("GOT ").append(new String(m.getBody())).append(' ').append(now).append(' ')
                    .append(m.getStoreTimestamp());
                TreeMap<String, String> props = new TreeMap<>(m.getProperties());
                for (Map.Entry<String, String> e : props.entrySet()) {
                    if (e.getKey().startsWith("TIMER_") || e.getKey().startsWith("REAL_")) {
                        sb.append(' ').append(e.getKey()).append('=').append(e.getValue());
                    }
                }
                System.out.println(sb);
                got.add(new String(m.getBody()));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        long deadline = System.currentTimeMillis() + delayMs + 40_000;
        while (System.currentTimeMillis() < deadline && new HashSet<>(got).size() < expect) Thread.sleep(20);
        Thread.sleep(2500);  // a recalled or duplicate delivery would come now
        if (recallIndex >= 0) {  // the handle of a message delivered already: its time has passed
            try {
                Method rm = DefaultMQProducer.class.getMethod("recallMessage", String.class, String.class);
                rm.invoke(p, topic, handles.get("t0"));
                System.out.println("RECALLEXPIRED 0");
            } catch (java.lang.reflect.InvocationTargetException e) {
                Throwable c2 = e.getCause();
                System.out.println("RECALLEXPIRED "
                    + (c2 instanceof MQBrokerException ? ((MQBrokerException) c2).getResponseCode() : -1));
            }
        }
        c.shutdown();
        p.shutdown();
        System.out.println("DONE " + got.size());
    }
}
