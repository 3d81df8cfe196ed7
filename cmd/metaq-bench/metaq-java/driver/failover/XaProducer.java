package failover;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;

import com.taobao.metamorphosis.Message;
import com.taobao.metamorphosis.client.XAMessageSessionFactory;
import com.taobao.metamorphosis.client.XAMetaMessageSessionFactory;
import com.taobao.metamorphosis.client.producer.SendResult;
import com.taobao.metamorphosis.client.producer.XAMessageProducer;

/**
 * Runs XA transactions of PER messages each ("javaxa-NAME-I") to one topic with the MetaQ 1.4.6 client's
 * XAMessageProducer and its XAResource, driven as a transaction manager drives it (start, sendMessage, end,
 * prepare, commit or rollback), one after the other:
 *
 * <ul>
 * <li>c2: prepared, then committed (two phase);</li>
 * <li>r2: prepared, then rolled back;</li>
 * <li>c1: committed in one phase, not prepared;</li>
 * <li>r0: rolled back before prepare;</li>
 * <li>p: prepared and left so; the producer is shut down (its connection closed), then a second producer
 * (another factory: another connection, as a transaction manager that restarted) recovers, and commits p with the
 * Xid recover returned.</li>
 * </ul>
 *
 * Brokers are found in ZooKeeper. Output on stdout:
 *
 * <pre>
 * msg NAME I MSGID PARTITION OFFSET
 * xa NAME STEP ok|fail [CODE]
 * recover TRANSACTIONKEY   (one line per Xid recover lists, then "recovered N")
 * </pre>
 *
 * then "done". A failure is printed on stderr too.
 *
 * <p>Usage: XaProducer ZKCONNECT ZKROOT TOPIC QUALIFIER PER
 */
public final class XaProducer {
    /** A transaction manager's Xid. */
    static final class TmXid implements Xid {
        private final byte[] gtrid;
        private final byte[] bqual;

        TmXid(final String gtrid, final String bqual) {
            this.gtrid = gtrid.getBytes(StandardCharsets.UTF_8);
            this.bqual = bqual.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public int getFormatId() {
            return 1;
        }

        @Override
        public byte[] getGlobalTransactionId() {
            return this.gtrid.clone();
        }

        @Override
        public byte[] getBranchQualifier() {
            return this.bqual.clone();
        }

        static boolean same(final Xid a, final Xid b) {
            return a.getFormatId() == b.getFormatId() && Arrays.equals(a.getGlobalTransactionId(), b.getGlobalTransactionId())
                    && Arrays.equals(a.getBranchQualifier(), b.getBranchQualifier());
        }
    }

    private static final PrintStream OUT = System.out;

    private static void report(final String name, final String step, final Exception e) {
        if (e == null) {
            OUT.println("xa " + name + " " + step + " ok");
        }
        else {
            final String code = e instanceof XAException ? " " + ((XAException) e).errorCode : "";
            System.err.println(name + " " + step + ": " + e);
            OUT.println("xa " + name + " " + step + " fail" + code);
        }
        OUT.flush();
    }

    /** Starts xid on producer's XAResource, sends per messages in it and ends it; false if a step failed. */
    private static boolean work(final XAMessageProducer producer, final XAResource res, final Xid xid, final String topic,
            final String name, final int per) {
        try {
            res.start(xid, XAResource.TMNOFLAGS);
        }
        catch (final Exception e) {
            report(name, "start", e);
            return false;
        }
        report(name, "start", null);
        for (int i = 0; i < per; i++) {
            final Message msg = new Message(topic, ("javaxa-" + name + "-" + i).getBytes(StandardCharsets.UTF_8));
            try {
                final SendResult r = producer.sendMessage(msg);
                if (!r.isSuccess()) {
                    report(name, "send", new Exception(r.getErrorMessage()));
                    return false;
                }
                OUT.println("msg " + name + " " + i + " " + msg.getId() + " " + r.getPartition().getPartition() + " "
                        + r.getOffset());
            }
            catch (final Exception e) {
                report(name, "send", e);
                return false;
            }
        }
        try {
            res.end(xid, XAResource.TMSUCCESS);
        }
        catch (final Exception e) {
            report(name, "end", e);
            return false;
        }
        report(name, "end", null);
        return true;
    }

    private static boolean prepare(final XAResource res, final Xid xid, final String name) {
        try {
            final int vote = res.prepare(xid);
            if (vote != XAResource.XA_OK) {
                report(name, "prepare", new Exception("vote " + vote + ", want XA_OK"));
                return false;
            }
        }
        catch (final Exception e) {
            report(name, "prepare", e);
            return false;
        }
        report(name, "prepare", null);
        return true;
    }

    private static void commit(final XAResource res, final Xid xid, final String name, final boolean onePhase) {
        try {
            res.commit(xid, onePhase);
            report(name, "commit", null);
        }
        catch (final Exception e) {
            report(name, "commit", e);
        }
    }

    private static void rollback(final XAResource res, final Xid xid, final String name) {
        try {
            res.rollback(xid);
            report(name, "rollback", null);
        }
        catch (final Exception e) {
            report(name, "rollback", e);
        }
    }

    public static void main(final String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: XaProducer ZKCONNECT ZKROOT TOPIC QUALIFIER PER");
            System.exit(2);
        }
        final String topic = args[2];
        final String qualifier = args[3];
        final int per = Integer.parseInt(args[4]);
        final XAMessageSessionFactory factory = new XAMetaMessageSessionFactory(Driver.clientConfig(args[0], args[1]));
        final XAMessageProducer producer = factory.createXAProducer();
        producer.setUniqueQualifier(qualifier);
        producer.publish(topic);
        OUT.println("ready");
        OUT.flush();

        // Each transaction takes the producer's XAResource of the moment: commit and rollback end it, and the
        // next getXAResource begins another (SimpleXAMessageProducer).
        Xid xid = new TmXid("gtrid-c2", "bq");
        XAResource res = producer.getXAResource();
        if (work(producer, res, xid, topic, "c2", per) && prepare(res, xid, "c2")) {
            commit(res, xid, "c2", false);
        }

        xid = new TmXid("gtrid-r2", "bq");
        res = producer.getXAResource();
        if (work(producer, res, xid, topic, "r2", per) && prepare(res, xid, "r2")) {
            rollback(res, xid, "r2");
        }

        xid = new TmXid("gtrid-c1", "bq");
        res = producer.getXAResource();
        if (work(producer, res, xid, topic, "c1", per)) {
            commit(res, xid, "c1", true);
        }

        xid = new TmXid("gtrid-r0", "bq");
        res = producer.getXAResource();
        if (work(producer, res, xid, topic, "r0", per)) {
            rollback(res, xid, "r0");
        }

        final Xid prepared = new TmXid("gtrid-p", "bq");
        res = producer.getXAResource();
        work(producer, res, prepared, topic, "p", per);
        prepare(res, prepared, "p");

        // A transaction manager that restarted: the first producer's connection closed with p prepared on it, then a
        // new factory, so a new connection, the same qualifier.
        producer.shutdown();
        factory.shutdown();
        final XAMessageSessionFactory factory2 = new XAMetaMessageSessionFactory(Driver.clientConfig(args[0], args[1]));
        final XAMessageProducer tm = factory2.createXAProducer();
        tm.setUniqueQualifier(qualifier);
        tm.publish(topic);
        final XAResource tmRes = tm.getXAResource();
        Xid found = null;
        try {
            final Xid[] xids = tmRes.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN);
            for (final Xid x : xids) {
                OUT.println("recover " + x);
                if (TmXid.same(x, prepared)) {
                    found = x;
                }
            }
            OUT.println("recovered " + xids.length);
        }
        catch (final Exception e) {
            report("p", "recover", e);
        }
        if (found != null) {
            commit(tmRes, found, "p", false);
        }
        OUT.flush();
        tm.shutdown();
        factory2.shutdown();
        OUT.println("done");
        OUT.flush();
        System.exit(0);
    }
}
