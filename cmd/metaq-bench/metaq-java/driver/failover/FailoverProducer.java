package failover;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import com.taobao.metamorphosis.Message;
import com.taobao.metamorphosis.client.MessageSessionFactory;
import com.taobao.metamorphosis.client.MetaMessageSessionFactory;
import com.taobao.metamorphosis.client.producer.MessageProducer;
import com.taobao.metamorphosis.client.producer.SendResult;

/**
 * Sends numbered messages ("java-SEQ" and SEQ % 13 dots, so that records differ in length) to one topic, one after the other, with the MetaQ 1.4.6
 * client's synchronous sendMessage, as a MetaQ user does: brokers are found in ZooKeeper, and a send that
 * fails (an unsuccessful SendResult or an exception) is retried after a short pause until it is acknowledged.
 * Every acknowledged send prints one line on stdout:
 *
 * <pre>
 * ack SEQ MSGID PARTITION OFFSET ATTEMPTS MILLIS
 * </pre>
 *
 * and every failed attempt one line on stderr. It stops when stdin is closed (the message being retried then
 * is not acknowledged, and not printed).
 *
 * <p>Usage: FailoverProducer ZKCONNECT ZKROOT TOPIC
 */
public final class FailoverProducer {
    /** The pause before a failed send is retried. */
    private static final long RETRY_PAUSE_MS = 100;

    public static void main(final String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: FailoverProducer ZKCONNECT ZKROOT TOPIC");
            System.exit(2);
        }
        final String topic = args[2];
        final MessageSessionFactory factory = new MetaMessageSessionFactory(Driver.clientConfig(args[0], args[1]));
        final MessageProducer producer = factory.createProducer();
        producer.publish(topic);
        final Driver.StopOnEOF stop = Driver.stopOnEOF();
        final PrintStream out = System.out;
        out.println("ready");
        out.flush();
        sending: for (long seq = 0; !stop.requested(); seq++) {
            final StringBuilder payload = new StringBuilder("java-").append(seq);
            for (long i = seq % 13; i > 0; i--) {
                payload.append('.');
            }
            final byte[] body = payload.toString().getBytes(StandardCharsets.UTF_8);
            for (int attempt = 1;; attempt++) {
                final Message msg = new Message(topic, body);
                String failure;
                try {
                    final SendResult r = producer.sendMessage(msg);
                    if (r.isSuccess()) {
                        out.println("ack " + seq + " " + msg.getId() + " " + r.getPartition().getPartition() + " "
                                + r.getOffset() + " " + attempt + " " + System.currentTimeMillis());
                        out.flush();
                        break;
                    }
                    failure = r.getErrorMessage();
                }
                catch (final Exception e) {
                    failure = e.toString();
                }
                System.err.println("fail " + seq + " attempt " + attempt + ": " + failure);
                if (stop.requested()) {
                    break sending;
                }
                Thread.sleep(RETRY_PAUSE_MS);
            }
        }
        producer.shutdown();
        factory.shutdown();
        out.println("done");
        out.flush();
        System.exit(0);
    }
}
