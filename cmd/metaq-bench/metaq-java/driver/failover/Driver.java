package failover;

import java.io.IOException;
import java.util.concurrent.CountDownLatch;

import com.taobao.metamorphosis.client.MetaClientConfig;
import com.taobao.metamorphosis.utils.ZkUtils.ZKConfig;

/** What the producer and the consumer share. */
final class Driver {
    private Driver() {
    }

    /** A client configuration that finds brokers under zkRoot of the ZooKeeper at zkConnect. */
    static MetaClientConfig clientConfig(final String zkConnect, final String zkRoot) {
        final ZKConfig zk = new ZKConfig();
        zk.zkConnect = zkConnect;
        zk.zkRoot = zkRoot;
        final MetaClientConfig cfg = new MetaClientConfig();
        cfg.setZkConfig(zk);
        return cfg;
    }

    /** Set once stdin reaches its end: the caller closing it (or dying) stops the driver. */
    static final class StopOnEOF {
        private final CountDownLatch eof = new CountDownLatch(1);

        boolean requested() {
            return this.eof.getCount() == 0;
        }

        void await() throws InterruptedException {
            this.eof.await();
        }
    }

    static StopOnEOF stopOnEOF() {
        final StopOnEOF s = new StopOnEOF();
        final Thread t = new Thread("stdin-eof") {
            @Override
            public void run() {
                try {
                    while (System.in.read() >= 0) {
                        // the content does not matter, only its end
                    }
                }
                catch (final IOException e) {
                    // a broken stdin ends it as well
                }
                s.eof.countDown();
            }
        };
        t.setDaemon(true);
        t.start();
        return s;
    }
}
