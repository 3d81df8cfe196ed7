package failover;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import com.taobao.metamorphosis.Message;
import com.taobao.metamorphosis.client.MessageSessionFactory;
import com.taobao.metamorphosis.client.MetaMessageSessionFactory;
import com.taobao.metamorphosis.client.producer.MessageProducer;
import com.taobao.metamorphosis.client.producer.SendResult;

/**
 * Sends COUNT local transactions of PER messages each ("javatx-SEQ-I") to one topic with the MetaQ 1.4.6
 * client's transaction API (beginTransaction, sendMessage, commit or rollback), one after the other; every third
 * transaction (SEQ % 3 == 2) is rolled back, the others committed. Brokers are found in ZooKeeper. Output on
 * stdout, one line per message sent and one per transaction ended:
 *
 * <pre>
 * msg SEQ I MSGID PARTITION OFFSET
 * tx SEQ commit|rollback ok|fail
 * </pre>
 *
 * then "done". A failure (an unsuccessful SendResult or an exception) is printed on stderr and ends that
 * transaction with a rollback, reported as "tx SEQ rollback fail".
 *
 * <p>Usage: TxProducer ZKCONNECT ZKROOT TOPIC COUNT PER
 */
public final class TxProducer {
    public static void main(final String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: TxProducer ZKCONNECT ZKROOT TOPIC COUNT PER");
            System.exit(2);
        }
        final String topic = args[2];
        final int count = Integer.parseInt(args[3]);
        final int per = Integer.parseInt(args[4]);
        final MessageSessionFactory factory = new MetaMessageSessionFactory(Driver.clientConfig(args[0], args[1]));
        final MessageProducer producer = factory.createProducer();
        producer.publish(topic);
        final PrintStream out = System.out;
        out.println("ready");
        out.flush();
        for (int seq = 0; seq < count; seq++) {
            final boolean commit = seq % 3 != 2;
            boolean ok = true;
            try {
                producer.beginTransaction();
                for (int i = 0; i < per && ok; i++) {
                    final Message msg = new Message(topic, ("javatx-" + seq + "-" + i).getBytes(StandardCharsets.UTF_8));
                    final SendResult r = producer.sendMessage(msg);
                    if (!r.isSuccess()) {
                        System.err.println("send " + seq + "-" + i + ": " + r.getErrorMessage());
                        ok = false;
                        break;
                    }
                    out.println("msg " + seq + " " + i + " " + msg.getId() + " " + r.getPartition().getPartition() + " "
                            + r.getOffset());
                }
                if (ok && commit) {
                    producer.commit();
                }
                else {
                    producer.rollback();
                }
            }
            catch (final Exception e) {
                System.err.println("transaction " + seq + ": " + e);
                ok = false;
                try {
                    producer.rollback();
                }
                catch (final Exception e2) {
                    System.err.println("rollback " + seq + ": " + e2);
                }
            }
            out.println("tx " + seq + " " + (ok && commit ? "commit" : "rollback") + " " + (ok ? "ok" : "fail"));
            out.flush();
        }
        producer.shutdown();
        factory.shutdown();
        out.println("done");
        out.flush();
        System.exit(0);
    }
}
