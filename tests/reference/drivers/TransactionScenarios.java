import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;

/**
 * The official RocketMQ 4.9.8 TransactionMQProducer against one broker (mqbroker or the Java
 * broker). args: namesrv prefix scenario...
 * Prints "RESULT <name> OK <facts>" or "RESULT <name> FAIL <why>", as ClientScenarios does.
 *
 * "tx": four transactions, keyed by what happens to them: commit (local COMMIT), rollback (local
 * ROLLBACK), unknown-commit and unknown-rollback (local UNKNOW, then the checker decides). A push
 * consumer started before any send must receive exactly the two committed ones, once each, and
 * nothing before the first commit. "refused": one send in transaction, which must fail promptly.
 */
public class TransactionScenarios {
    static String ns;
    static String prefix;
    static final long WAIT_MS = 60_000;

    public static void main(String[] args) throws Exception {
        ns = args[0];
        prefix = args[1];
        for (int i = 2; i < args.length; i++) {
            String name = args[i];
            long t0 = System.currentTimeMillis();
            try {
                String facts = name.equals("tx") ? tx() : refused();
                System.out.println("RESULT " + name + " OK " + facts + " ms=" + (System.currentTimeMillis() - t0));
            } catch (Throwable e) {
                System.out.println("RESULT " + name + " FAIL " + String.valueOf(e).replace('\n', ' '));
                e.printStackTrace(System.out);
            }
            System.out.flush();
        }
        System.exit(0);
    }

    static TransactionMQProducer producer(String group, Set<String> asked) throws Exception {
        TransactionMQProducer p = new TransactionMQProducer(prefix + group);
        p.setNamesrvAddr(ns);
        p.setInstanceName(prefix + group);
        p.setSendMsgTimeout(15_000);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String key = msg.getKeys();
                if (key.equals("commit")) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }
                if (key.equals("rollback")) {
                    return LocalTransactionState.ROLLBACK_MESSAGE;
                }
                return LocalTransactionState.UNKNOW;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String key = msg.getKeys();
                asked.add(key + "@" + msg.getTopic());
                return key.equals("unknown-commit") ? LocalTransactionState.COMMIT_MESSAGE
                    : key.equals("unknown-rollback") ? LocalTransactionState.ROLLBACK_MESSAGE
                    : LocalTransactionState.UNKNOW;
            }
        });
        p.start();
        return p;
    }

    static String tx() throws Exception {
        String topic = prefix + "TxJava";
        Set<String> asked = ConcurrentHashMap.newKeySet();
        TransactionMQProducer p = producer("pg-tx", asked);
        Map<String, Integer> received = new ConcurrentHashMap<>();
        List<String> order = Collections.synchronizedList(new ArrayList<>());
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(prefix + "cg-tx");
        c.setNamesrvAddr(ns);
        c.setInstanceName(prefix + "cg-tx");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        try {
            // the topic exists before the consumer starts (a plain send creates it)
            SendResult warm = p.send(new Message(topic, "warm", "warm", "w".getBytes(StandardCharsets.UTF_8)));
            check(warm.getSendStatus() == SendStatus.SEND_OK, "warm-up " + warm);
            c.subscribe(topic, "tx");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    received.merge(m.getKeys(), 1, Integer::sum);
                    order.add(m.getKeys() + ":" + m.getProperty("TRAN_MSG") + ":" + m.getProperty("PGROUP")
                        + ":" + (m.getSysFlag() & 0xC) + ":" + (m.getPreparedTransactionOffset() > 0));
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            List<String> states = new ArrayList<>();
            String commitTxId = "";
            for (String key : new String[] {"commit", "rollback", "unknown-commit", "unknown-rollback"}) {
                Message m = new Message(topic, "tx", key, ("body-" + key).getBytes(StandardCharsets.UTF_8));
                TransactionSendResult r = p.sendMessageInTransaction(m, null);
                check(r.getSendStatus() == SendStatus.SEND_OK, key + " " + r);
                states.add(key + ":" + r.getLocalTransactionState());
                if (key.equals("commit")) {
                    commitTxId = String.valueOf(r.getTransactionId() != null && r.getTransactionId().equals(r.getMsgId()));
                }
            }
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (System.currentTimeMillis() < deadline
                && !(received.containsKey("commit") && received.containsKey("unknown-commit")
                     && asked.contains("unknown-rollback@" + topic))) {
                Thread.sleep(100);
            }
            // a little longer: nothing more may arrive (a second copy, the rolled-back ones)
            Thread.sleep(3000);
            List<String> keys = new ArrayList<>(received.keySet());
            Collections.sort(keys);
            List<String> askedSorted = new ArrayList<>(asked);
            Collections.sort(askedSorted);
            List<String> seen = new ArrayList<>(order);
            Collections.sort(seen);
            return ("received=" + keys + " counts=" + new TreeMap<>(received).values()
                + " txIdIsMsgId=" + commitTxId + " states=" + states + " asked=" + askedSorted + " seen=" + seen).replace(", ", ",").replace(prefix, "");
        } finally {
            c.shutdown();
            p.shutdown();
        }
    }

    static String refused() throws Exception {
        TransactionMQProducer p = producer("pg-tx-refused", ConcurrentHashMap.newKeySet());
        long t0 = System.currentTimeMillis();
        try {
            Message m = new Message(prefix + "TxRefused", "tx", "k", "x".getBytes(StandardCharsets.UTF_8));
            TransactionSendResult r = p.sendMessageInTransaction(m, null);
            return "refused=false status=" + r.getSendStatus() + " state=" + r.getLocalTransactionState();
        } catch (Exception e) {
            String why = String.valueOf(e.getMessage()).split("\n")[0];
            return "refused=true ms=" + (System.currentTimeMillis() - t0) + " why=" + why.replace(' ', '_');
        } finally {
            p.shutdown();
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }
}
