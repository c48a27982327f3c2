import java.nio.charset.StandardCharsets;
import java.util.*;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.RequestCode;
import org.apache.rocketmq.common.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.common.protocol.header.SendMessageRequestHeader;
import org.apache.rocketmq.common.protocol.header.SendMessageRequestHeaderV2;
import org.apache.rocketmq.common.protocol.header.CreateTopicRequestHeader;
import org.apache.rocketmq.common.protocol.header.UpdateConsumerOffsetRequestHeader;
import org.apache.rocketmq.common.protocol.heartbeat.ConsumeType;
import org.apache.rocketmq.common.protocol.heartbeat.ConsumerData;
import org.apache.rocketmq.common.protocol.heartbeat.HeartbeatData;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.common.protocol.heartbeat.SubscriptionData;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyRemotingClient;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * Plain ACL with the official 4.9.8 Java client (AclClientRPCHook), against one broker.
 * args: brokerAddr namesrvAddr scenario...; a scenario is "name|accessKey|secretKey|kind|topic|group"
 * (empty accessKey: no hook, an unsigned request). Kinds:
 *   vector   - sign a fixed SEND_MESSAGE_V2 request offline; prints the signed extFields and the body,
 *              so the Python signer can be checked byte for byte ("VECTOR name {json} hex")
 *   send, pull, offset, create, heartbeat - one raw request to the broker through NettyRemotingClient
 *              with the hook: prints "RESULT name code=<code> remark=<remark>"
 *   produce  - a DefaultMQProducer with the hook sends one message: "RESULT name OK ..." or "FAIL code=..."
 *   consume  - a DefaultLitePullConsumer with the hook reads the topic: "RESULT name OK got=<n>"
 */
public class AclScenarios {
    public static void main(String[] args) throws Exception {
        String broker = args[0];
        String ns = args[1];
        for (int i = 2; i < args.length; i++) {
            String[] p = args[i].split("\\|", -1);
            String name = p[0];
            try {
                System.out.println(run(broker, ns, name, p[1], p[2], p[3], p[4], p[5]));
            } catch (Throwable e) {
                System.out.println("RESULT " + name + " ERROR " + String.valueOf(e).replace('\n', ' '));
            }
            System.out.flush();
        }
        System.exit(0);
    }

    static RPCHook hook(String ak, String sk) {
        return ak.isEmpty() ? null : new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    static String run(String broker, String ns, String name, String ak, String sk, String kind, String topic,
                      String group) throws Exception {
        switch (kind) {
            case "vector": return vector(name, ak, sk);
            case "produce": return produce(name, ns, ak, sk, topic, group);
            case "consume": return consume(name, ns, ak, sk, topic, group);
            default: return raw(name, broker, ak, sk, kind, topic, group);
        }
    }

    static SendMessageRequestHeaderV2 sendHeader(String topic, String group) {
        SendMessageRequestHeader h = new SendMessageRequestHeader();
        h.setProducerGroup(group);
        h.setTopic(topic);
        h.setDefaultTopic("TBW102");
        h.setDefaultTopicQueueNums(4);
        h.setQueueId(0);
        h.setSysFlag(0);
        h.setBornTimestamp(1700000000000L);
        h.setFlag(0);
        h.setProperties("KEYS\u0001k1\u0002UNIQ_KEY\u0001AC1100010000000000000000000000000\u0002");
        h.setReconsumeTimes(0);
        h.setUnitMode(false);
        h.setBatch(false);
        return SendMessageRequestHeaderV2.createSendMessageRequestHeaderV2(h);
    }

    static String vector(String name, String ak, String sk) throws Exception {
        RemotingCommand cmd = RemotingCommand.createRequestCommand(RequestCode.SEND_MESSAGE_V2,
            sendHeader("TopicVector", "PG_vector"));
        cmd.setBody("hello acl \u00e9".getBytes(StandardCharsets.UTF_8));
        new AclClientRPCHook(new SessionCredentials(ak, sk)).doBeforeRequest("127.0.0.1:1", cmd);
        StringBuilder sb = new StringBuilder("{");
        for (Map.Entry<String, String> e : new TreeMap<>(cmd.getExtFields()).entrySet()) {
            if (sb.length() > 1) sb.append(',');
            sb.append(quote(e.getKey())).append(':').append(quote(e.getValue()));
        }
        StringBuilder hex = new StringBuilder();
        for (byte b : cmd.getBody()) hex.append(String.format("%02x", b));
        return "VECTOR " + name + " " + sb.append('}') + " " + hex;
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20 || c > 0x7e) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }

    static String raw(String name, String broker, String ak, String sk, String kind, String topic, String group)
            throws Exception {
        NettyRemotingClient client = new NettyRemotingClient(new NettyClientConfig());
        RPCHook h = hook(ak, sk);
        if (h != null) client.registerRPCHook(h);
        client.start();
        try {
            RemotingCommand cmd;
            switch (kind) {
                case "send":
                    cmd = RemotingCommand.createRequestCommand(RequestCode.SEND_MESSAGE_V2, sendHeader(topic, group));
                    cmd.setBody("acl body".getBytes(StandardCharsets.UTF_8));
                    break;
                case "pull": {
                    PullMessageRequestHeader ph = new PullMessageRequestHeader();
                    ph.setConsumerGroup(group);
                    ph.setTopic(topic);
                    ph.setQueueId(0);
                    ph.setQueueOffset(0L);
                    ph.setMaxMsgNums(1);
                    ph.setSysFlag(0);
                    ph.setCommitOffset(0L);
                    ph.setSuspendTimeoutMillis(0L);
                    ph.setSubscription("*");
                    ph.setSubVersion(0L);
                    cmd = RemotingCommand.createRequestCommand(RequestCode.PULL_MESSAGE, ph);
                    break;
                }
                case "offset": {
                    UpdateConsumerOffsetRequestHeader oh = new UpdateConsumerOffsetRequestHeader();
                    oh.setConsumerGroup(group);
                    oh.setTopic(topic);
                    oh.setQueueId(0);
                    oh.setCommitOffset(0L);
                    cmd = RemotingCommand.createRequestCommand(RequestCode.UPDATE_CONSUMER_OFFSET, oh);
                    break;
                }
                case "create": {
                    CreateTopicRequestHeader ch = new CreateTopicRequestHeader();
                    ch.setTopic(topic);
                    ch.setDefaultTopic("TBW102");
                    ch.setReadQueueNums(4);
                    ch.setWriteQueueNums(4);
                    ch.setPerm(6);
                    ch.setTopicFilterType("SINGLE_TAG");
                    ch.setTopicSysFlag(0);
                    ch.setOrder(false);
                    cmd = RemotingCommand.createRequestCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ch);
                    break;
                }
                case "heartbeat": {
                    HeartbeatData hb = new HeartbeatData();
                    hb.setClientID("127.0.0.1@acl-" + name);
                    ConsumerData cd = new ConsumerData();
                    cd.setGroupName(group);
                    cd.setConsumeType(ConsumeType.CONSUME_PASSIVELY);
                    cd.setMessageModel(MessageModel.CLUSTERING);
                    cd.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                    SubscriptionData sd = new SubscriptionData();
                    sd.setTopic(topic);
                    sd.setSubString("*");
                    cd.getSubscriptionDataSet().add(sd);
                    hb.getConsumerDataSet().add(cd);
                    cmd = RemotingCommand.createRequestCommand(RequestCode.HEART_BEAT, null);
                    cmd.setBody(hb.encode());
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown kind " + kind);
            }
            RemotingCommand resp = client.invokeSync(broker, cmd, 15000);  // generous: a loaded CI machine
            String remark = resp.getRemark() == null ? "" : resp.getRemark().replace('\n', ' ');
            return "RESULT " + name + " code=" + resp.getCode() + " remark=" + remark;
        } finally {
            client.shutdown();
        }
    }

    static String produce(String name, String ns, String ak, String sk, String topic, String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group, hook(ak, sk));
        p.setNamesrvAddr(ns);
        p.setInstanceName("acl-" + name);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        try {
            SendResult r = p.send(new Message(topic, "TagA", ("from java " + name).getBytes(StandardCharsets.UTF_8)));
            return "RESULT " + name + " OK status=" + r.getSendStatus();
        } catch (Exception e) {
            Throwable t = e;
            while (t != null && !(t instanceof MQBrokerException)) t = t.getCause();
            if (t == null) throw e;
            MQBrokerException b = (MQBrokerException) t;
            return "RESULT " + name + " FAIL code=" + b.getResponseCode() + " " + String.valueOf(b.getErrorMessage()).replace('\n', ' ');
        } finally {
            p.shutdown();
        }
    }

    static String consume(String name, String ns, String ak, String sk, String topic, String group) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group, hook(ak, sk));
        c.setNamesrvAddr(ns);
        c.setInstanceName("acl-" + name);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.start();
        try {
            int got = 0;
            long deadline = System.currentTimeMillis() + 20_000;
            while (got == 0 && System.currentTimeMillis() < deadline) {
                List<MessageExt> msgs = c.poll(1000);
                got += msgs.size();
            }
            return "RESULT " + name + " OK got=" + got;
        } finally {
            c.shutdown();
        }
    }
}
