import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.exception.RequestTimeoutException;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;

/**
 * Request-reply (DefaultMQProducer.request) of the official 4.9.8 Java client against one
 * broker. args: namesrv prefix scenario...; each prints "RESULT <name> OK <facts>" or
 * "RESULT <name> FAIL <why>".
 *   roundtrip     a Java push consumer answers with MessageUtil.createReplyMessage; three
 *                 requests get their replies
 *   timeout       nobody answers: RequestTimeoutException after the timeout
 *   request_only  requests on <prefix>RpcPy, answered by someone else (a Python replier)
 */
public class RequestReply {
    static String ns;
    static String prefix;

    public static void main(String[] args) throws Exception {
        ns = args[0];
        prefix = args[1];
        for (int i = 2; i < args.length; i++) {
            String name = args[i];
            long t0 = System.currentTimeMillis();
            try {
                String facts = run(name);
                System.out.println("RESULT " + name + " OK " + facts + " ms=" + (System.currentTimeMillis() - t0));
            } catch (Throwable e) {
                System.out.println("RESULT " + name + " FAIL " + String.valueOf(e).replace('\n', ' '));
                e.printStackTrace(System.out);
            }
            System.out.flush();
        }
        System.exit(0);
    }

    static String run(String name) throws Exception {
        switch (name) {
            case "roundtrip": return roundtrip();
            case "timeout": return timeout();
            case "request_only": return requestOnly();
            default: throw new IllegalArgumentException("unknown scenario " + name);
        }
    }

    static DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(prefix + group);
        p.setNamesrvAddr(ns);
        p.setInstanceName(prefix + group);
        p.setSendMsgTimeout(15_000);
        p.start();
        return p;
    }

    static String body(Message m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static String roundtrip() throws Exception {
        String topic = prefix + "RpcJava";
        DefaultMQProducer replier = producer("replier");
        DefaultMQProducer requester = producer("requester");
        requester.send(new Message(topic, "warm".getBytes(StandardCharsets.UTF_8)));  // auto-creates the topic
        AtomicInteger replyErrors = new AtomicInteger();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(prefix + "rpc-consumer");
        c.setNamesrvAddr(ns);
        c.setInstanceName(prefix + "rpc-consumer");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (m.getProperty(MessageConst.PROPERTY_CORRELATION_ID) == null) {
                    continue;  // the warm-up message
                }
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("re:" + body(m)).getBytes(StandardCharsets.UTF_8));
                    replier.send(reply, 10_000);
                } catch (Exception e) {
                    replyErrors.incrementAndGet();
                    e.printStackTrace(System.out);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            List<String> bodies = new ArrayList<>();
            String replyTopic = null;
            String ttl = null;
            boolean sameCorrelation = true;
            long deadline = System.currentTimeMillis() + 60_000;
            for (int i = 0; i < 3; i++) {
                Message request = new Message(topic, ("q" + i).getBytes(StandardCharsets.UTF_8));
                Message reply = null;
                // the consumer's first rebalance may still be on its way: a request nobody saw times out
                while (reply == null) {
                    try {
                        reply = requester.request(request, 5_000);
                    } catch (RequestTimeoutException notYet) {
                        check(System.currentTimeMillis() < deadline, "no reply within 60 s: " + notYet);
                        request = new Message(topic, ("q" + i).getBytes(StandardCharsets.UTF_8));
                    }
                }
                bodies.add(body(reply));
                replyTopic = reply.getTopic();
                ttl = reply.getProperty(MessageConst.PROPERTY_MESSAGE_TTL);
                sameCorrelation &= request.getProperty(MessageConst.PROPERTY_CORRELATION_ID)
                    .equals(reply.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
            }
            return "replies=" + String.join(",", bodies) + " replyTopic=" + replyTopic + " ttl=" + ttl
                + " sameCorrelation=" + sameCorrelation + " replyErrors=" + replyErrors.get();
        } finally {
            c.shutdown();
            requester.shutdown();
            replier.shutdown();
        }
    }

    static String timeout() throws Exception {
        String topic = prefix + "RpcNobody";
        DefaultMQProducer requester = producer("lonely");
        try {
            requester.send(new Message(topic, "warm".getBytes(StandardCharsets.UTF_8)));
            long t0 = System.currentTimeMillis();
            try {
                requester.request(new Message(topic, "anyone?".getBytes(StandardCharsets.UTF_8)), 1_500);
                return "timedOut=false";
            } catch (RequestTimeoutException e) {
                long waited = System.currentTimeMillis() - t0;
                return "timedOut=true waitedOk=" + (waited >= 1_400 && waited < 5_000)
                    + " errorCode=" + e.getResponseCode();
            }
        } finally {
            requester.shutdown();
        }
    }

    static String requestOnly() throws Exception {
        String topic = prefix + "RpcPy";
        DefaultMQProducer requester = producer("java-requester");
        try {
            List<String> bodies = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60_000;
            for (int i = 0; i < 3; i++) {
                Message reply = null;
                while (reply == null) {
                    try {
                        reply = requester.request(new Message(topic, ("j" + i).getBytes(StandardCharsets.UTF_8)), 5_000);
                    } catch (RequestTimeoutException notYet) {
                        check(System.currentTimeMillis() < deadline, "no reply within 60 s: " + notYet);
                    }
                }
                bodies.add(body(reply));
            }
            return "replies=" + String.join(",", bodies);
        } finally {
            requester.shutdown();
        }
    }
}
