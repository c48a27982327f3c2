import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.*;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Which messages each SQL92 expression selects, as a broker answers it, so the same file can be
 * run against mqbroker and the Java broker and the answers compared line by line.
 * args: namesrv topic matrix-file. The file has lines "M<TAB>tag<TAB>k=v;k=v" (a message; its
 * body is its index) and "E<TAB>expression". Output: "X <i> <indices>" or "X <i> ERROR <code>".
 */
public class SqlMatrix {
    public static void main(String[] args) throws Exception {
        String ns = args[0], topic = args[1];
        List<String[]> messages = new ArrayList<>();
        List<String> expressions = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(args[2]), StandardCharsets.UTF_8)) {
            String[] f = line.split("\t", -1);
            if (f[0].equals("M")) {
                messages.add(f);
            } else if (f[0].equals("E")) {
                expressions.add(f[1]);
            }
        }
        DefaultMQProducer p = new DefaultMQProducer("sqlmatrix-pg");
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(15_000);
        p.start();
        MessageQueue mq = null;
        for (int i = 0; i < messages.size(); i++) {
            String[] f = messages.get(i);
            Message m = new Message(topic, f[1], String.valueOf(i).getBytes(StandardCharsets.UTF_8));
            if (f[1].isEmpty()) {
                m.setTags(null);
            }
            for (String kv : f[2].split(";")) {
                int eq = kv.indexOf('=');
                if (eq > 0) {
                    m.putUserProperty(kv.substring(0, eq), kv.substring(eq + 1));
                }
            }
            if (mq == null) {
                mq = p.send(m).getMessageQueue();
            } else {
                p.send(m, mq);
            }
        }
        p.shutdown();
        DefaultMQPullConsumer c = new DefaultMQPullConsumer("sqlmatrix-cg");
        c.setNamesrvAddr(ns);
        c.start();
        // the client refuses SQL92 pulls to a broker whose version it has not learnt from a
        // heartbeat answer: learn the route, then send one
        c.fetchSubscribeMessageQueues(topic);
        org.apache.rocketmq.client.impl.factory.MQClientInstance f = c.getDefaultMQPullConsumerImpl().getRebalanceImpl().getmQClientFactory();
        for (long deadline = System.currentTimeMillis() + 30_000; System.currentTimeMillis() < deadline; Thread.sleep(200)) {
            f.updateTopicRouteInfoFromNameServer(topic, false, null);  // fills the client's broker table
            f.sendHeartbeatToAllBrokerWithLock();  // skipped while the client's own heartbeat runs
            org.apache.rocketmq.client.impl.FindBrokerResult b = f.findBrokerAddressInSubscribe(mq.getBrokerName(), 0, false);
            if (b != null && b.getBrokerVersion() > 0) {
                break;
            }
        }
        try {
            for (int e = 0; e < expressions.size(); e++) {
                StringBuilder out = new StringBuilder("X " + e + " ");
                try {
                    List<Integer> got = new ArrayList<>();
                    long offset = 0;
                    for (int round = 0; round < 100 && offset < messages.size(); round++) {
                        PullResult r = c.pull(mq, MessageSelector.bySql(expressions.get(e)), offset, 32, 10_000);
                        if (r.getPullStatus() == PullStatus.FOUND) {
                            for (MessageExt m : r.getMsgFoundList()) {
                                got.add(Integer.parseInt(new String(m.getBody(), StandardCharsets.UTF_8)));
                            }
                        }
                        offset = r.getNextBeginOffset();
                        if (r.getPullStatus() == PullStatus.NO_NEW_MSG || r.getPullStatus() == PullStatus.OFFSET_ILLEGAL) {
                            break;
                        }
                    }
                    Collections.sort(got);
                    out.append(got.toString().replace(" ", ""));
                } catch (MQBrokerException ex) {
                    out.append("ERROR ").append(ex.getResponseCode());
                }
                System.out.println(out);
            }
        } finally {
            c.shutdown();
        }
        System.exit(0);
    }
}
