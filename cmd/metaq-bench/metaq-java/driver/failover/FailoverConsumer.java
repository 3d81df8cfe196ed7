package failover;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executor;

import com.taobao.metamorphosis.Message;
import com.taobao.metamorphosis.client.MessageSessionFactory;
import com.taobao.metamorphosis.client.MetaMessageSessionFactory;
import com.taobao.metamorphosis.client.consumer.ConsumerConfig;
import com.taobao.metamorphosis.client.consumer.MessageConsumer;
import com.taobao.metamorphosis.client.consumer.MessageListener;

/**
 * Consumes one topic as a member of a consumer group with the MetaQ 1.4.6 client's MessageConsumer (brokers
 * and offsets in ZooKeeper), printing one line on stdout for every message it receives:
 *
 * <pre>
 * got PAYLOAD MSGID PARTITION
 * </pre>
 *
 * It stops when stdin is closed: shutting the consumer down commits its offsets to ZooKeeper
 * (ZKROOT/consumers/GROUP/offsets/TOPIC/BROKERID-PARTITION, "MSGID-OFFSET"), where the caller reads them.
 *
 * <p>Usage: FailoverConsumer ZKCONNECT ZKROOT TOPIC GROUP [MAX_DELAY_FETCH_MS]
 *
 * <p>MAX_DELAY_FETCH_MS is the consumer's back-off after empty fetches ({@code maxDelayFetchTimeInMills}):
 * {@link #DEFAULT_MAX_DELAY_FETCH_MS} when left out; MetaQ's default is 5000.
 */
public final class FailoverConsumer {
    /**
     * The back-off after empty fetches when none is given: caught up, the consumer asks again within 100 ms
     * (MetaQ's default: up to 5 s), so it reads the newest records at the master, those an unplanned failover
     * can lose.
     */
    static final long DEFAULT_MAX_DELAY_FETCH_MS = 100;

    public static void main(final String[] args) throws Exception {
        if (args.length != 4 && args.length != 5) {
            System.err.println("usage: FailoverConsumer ZKCONNECT ZKROOT TOPIC GROUP [MAX_DELAY_FETCH_MS]");
            System.exit(2);
        }
        long maxDelayFetchMs = DEFAULT_MAX_DELAY_FETCH_MS;
        if (args.length == 5) {
            try {
                maxDelayFetchMs = Long.parseLong(args[4]);
            }
            catch (final NumberFormatException e) {
                maxDelayFetchMs = -1;
            }
            if (maxDelayFetchMs <= 0) {
                System.err.println("FailoverConsumer: MAX_DELAY_FETCH_MS " + args[4] + " is not a positive number");
                System.exit(2);
            }
        }
        final PrintStream out = System.out;
        final MessageSessionFactory factory = new MetaMessageSessionFactory(Driver.clientConfig(args[0], args[1]));
        final ConsumerConfig cc = new ConsumerConfig(args[3]);
        cc.setCommitOffsetPeriodInMills(1000);
        cc.setMaxDelayFetchTimeInMills(maxDelayFetchMs);
        final MessageConsumer consumer = factory.createConsumer(cc);
        consumer.subscribe(args[2], 1024 * 1024, new MessageListener() {
            @Override
            public void recieveMessages(final Message m) {
                synchronized (out) {
                    out.println("got " + new String(m.getData(), StandardCharsets.UTF_8) + " " + m.getId() + " "
                            + m.getPartition().getPartition());
                    out.flush();
                }
            }

            @Override
            public Executor getExecutor() {
                return null;
            }
        });
        consumer.completeSubscribe();
        synchronized (out) {
            out.println("ready");
            out.flush();
        }
        final Driver.StopOnEOF stop = Driver.stopOnEOF();
        stop.await();
        consumer.shutdown();
        factory.shutdown();
        synchronized (out) {
            out.println("done");
            out.flush();
        }
        System.exit(0);
    }
}
