package com.taobao.metamorphosis.server.assembly;

import java.io.File;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import com.taobao.metamorphosis.server.BrokerZooKeeper;
import com.taobao.metamorphosis.server.utils.MetaConfig;
import com.taobao.metamorphosis.utils.ZkUtils;

/**
 * Stands in for MetaQ's in-process broker in MetaQ's integration tests
 * (metamorphosis-integration-test, run by run.sh beside this tree): it runs
 * this project's broker (metaq-server, from $METAQ_SERVER) on the test's own
 * ini file, unchanged, in a process of its own, with the data directory the
 * test chose. start returns once the broker and its topics are registered
 * in ZooKeeper, as MetaQ's start does; stop is a SIGTERM, a clean stop. Only
 * what the tests call is provided.
 */
public class MetaMorphosisBroker {
    private final MetaConfig metaConfig;
    private final BrokerZooKeeper brokerZooKeeper;
    private final String mode;
    private final String propsFile;
    private final int slaveId;
    private Process process;

    public MetaMorphosisBroker(final MetaConfig metaConfig) {
        this(metaConfig, null, null, -1);
    }

    /** mode: null (master), slave, samsa or gregor; propsFile: the mode's properties. */
    public MetaMorphosisBroker(final MetaConfig metaConfig, final String mode, final String propsFile,
            final int slaveId) {
        this.metaConfig = metaConfig;
        this.mode = mode;
        this.propsFile = propsFile;
        this.slaveId = slaveId;
        // The tests clear consumer offsets through it before start. A file
        // whose ZooKeeper MetaConfig leaves unset (gregor_server1.ini) gets
        // the suite's zk.properties, as MetaQ's client does.
        if (metaConfig.getZkConfig() == null) {
            try {
                final java.util.Properties p = com.taobao.metamorphosis.utils.Utils.getResourceAsProperties("zk.properties", "GBK");
                final ZkUtils.ZKConfig zk = new ZkUtils.ZKConfig();
                zk.zkConnect = p.getProperty("zk.zkConnect");
                metaConfig.setZkConfig(zk);
            }
            catch (final Exception e) {
                throw new RuntimeException("zk.properties", e);
            }
        }
        this.brokerZooKeeper = new BrokerZooKeeper(metaConfig);
    }

    public MetaConfig getMetaConfig() {
        return this.metaConfig;
    }

    public BrokerZooKeeper getBrokerZooKeeper() {
        return this.brokerZooKeeper;
    }

    public synchronized boolean isShutdown() {
        return this.process == null;
    }

    public synchronized void start() {
        if (this.process != null) {
            return;
        }
        final String bin = System.getenv().getOrDefault("METAQ_SERVER", "metaq-server");
        final List<String> cmd = new ArrayList<String>();
        cmd.add(bin);
        cmd.add("start");
        if (this.mode != null) {
            cmd.add(this.mode);
        }
        cmd.add("--foreground");
        cmd.add("-f");
        cmd.add(this.metaConfig.getConfigFilePath());
        cmd.add("-data");
        cmd.add(this.metaConfig.getDataPath());
        // MetaQ's files leave hostName empty (the broker would advertise this
        // host's first address): the tests stay on loopback.
        cmd.add("-listen");
        cmd.add("127.0.0.1:" + this.metaConfig.getServerPort());
        if (this.propsFile != null) {
            cmd.add("-s");
            cmd.add(this.propsFile);
        }
        final String admin = System.getenv("METAQ_IT_ADMIN");
        if (admin != null && !admin.isEmpty()) {
            cmd.add("-admin");
            cmd.add(admin);
        }
        final String logDir = System.getenv().getOrDefault("METAQ_IT_LOGS", System.getProperty("java.io.tmpdir"));
        cmd.add("-logdir");
        cmd.add(logDir);
        try {
            final ProcessBuilder pb = new ProcessBuilder(cmd);
            pb.redirectErrorStream(true);
            final String name = new File(this.metaConfig.getConfigFilePath()).getName();
            pb.redirectOutput(ProcessBuilder.Redirect.appendTo(new File(logDir, name + ".out")));
            this.process = pb.start();
        }
        catch (final Exception e) {
            throw new RuntimeException("start " + cmd, e);
        }
        final long deadline = System.currentTimeMillis() + 60000;
        while (System.currentTimeMillis() < deadline) {
            if (!this.process.isAlive()) {
                final int rc = this.process.exitValue();
                this.process = null;
                throw new IllegalStateException("metaq-server exited " + rc + ": " + cmd);
            }
            if (this.registered()) {
                this.settle();
                return;
            }
            try {
                Thread.sleep(100);
            }
            catch (final InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
        this.stop();
        throw new IllegalStateException("metaq-server did not register within 60s: " + cmd);
    }

    // registered: the port answers and the broker's node is in ZooKeeper.
    private boolean registered() {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", this.metaConfig.getServerPort()), 1000);
        }
        catch (final Exception e) {
            return false;
        }
        if ("gregor".equals(this.mode)) {
            return true; // a synchronous slave starts before its master and registers nothing
        }
        // A master registers ids/<id>/master and <id>-m under each topic, an
        // async slave ids/<id>/slave<n> and <id>-s<n>: the consumers
        // rebalance on them, which MetaQ's start has caused when it returns.
        final boolean slave = "slave".equals(this.mode);
        final String ids = this.brokerZooKeeper.getMetaZookeeper().brokerIdsPath + "/" + this.metaConfig.getBrokerId();
        if (!this.brokerZooKeeper.getZkClient().exists(ids + (slave ? "/slave" + this.slaveId : "/master"))) {
            return false;
        }
        for (final String topic : this.metaConfig.getTopics()) {
            if (topic.contains("*")) {
                continue; // a wildcard section: its topics register at their first put
            }
            final String t = this.brokerZooKeeper.getMetaZookeeper().brokerTopicsPath + "/" + topic + "/"
                    + this.metaConfig.getBrokerId() + (slave ? "-s" + this.slaveId : "-m");
            if (!this.brokerZooKeeper.getZkClient().exists(t)) {
                return false;
            }
        }
        return true;
    }

    public synchronized void stop() {
        if (this.process == null) {
            return;
        }
        this.process.destroy(); // SIGTERM: a clean stop
        try {
            if (!this.process.waitFor(30, TimeUnit.SECONDS)) {
                this.process.destroyForcibly().waitFor();
            }
        }
        catch (final InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        this.process = null;
        this.settle();
    }

    // settle gives the consumers time to rebalance on the change, which
    // MetaQ's broker, slower to start and stop, leaves them: the client
    // refuses a subscribe while its fetch runners are stopped for one
    // ("Consumer has been shutdown"), and the HA tests subscribe right after.
    private void settle() {
        try {
            Thread.sleep(Long.getLong("metaq.it.settleMs", 2000L));
        }
        catch (final InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
