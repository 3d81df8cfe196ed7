package com.taobao.metamorphosis;

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.util.Map;
import java.util.Properties;

import com.taobao.metamorphosis.server.assembly.MetaMorphosisBroker;
import com.taobao.metamorphosis.server.utils.MetaConfig;

/**
 * Stands in for MetaQ's broker with plugins: the plugin named picks the
 * Go broker's mode (metaslave: an async slave, samsa: a synchronous master,
 * gregor: a synchronous slave), its properties become the mode's file.
 */
public class EnhancedBroker {
    private final MetaMorphosisBroker broker;

    public EnhancedBroker(final MetaConfig metaConfig, final Map<String, Properties> pluginsInfo) {
        String mode = null;
        String props = null;
        int slaveId = -1;
        if (pluginsInfo != null && !pluginsInfo.isEmpty()) {
            final Map.Entry<String, Properties> e = pluginsInfo.entrySet().iterator().next();
            mode = e.getKey().equals("metaslave") ? "slave" : e.getKey();
            slaveId = Integer.parseInt(e.getValue().getProperty("slaveId", "-1").trim());
            try {
                final File f = File.createTempFile(mode + "-", ".properties");
                f.deleteOnExit();
                try (OutputStream out = new FileOutputStream(f)) {
                    e.getValue().store(out, null);
                }
                props = f.getAbsolutePath();
            }
            catch (final Exception ex) {
                throw new RuntimeException(ex);
            }
        }
        this.broker = new MetaMorphosisBroker(metaConfig, mode, props, slaveId);
    }

    public MetaMorphosisBroker getBroker() {
        return this.broker;
    }

    public void start() {
        this.broker.start();
    }

    public void stop() {
        this.broker.stop();
    }
}
