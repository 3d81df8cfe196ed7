package ctl

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"metaq/broker/config"
	"metaq/internal/hostaddr"
)

// Files are where a server keeps its pid and log, as metaServer.sh does
// (logs/.run.pid and logs/metaServer.log next to conf/).
type Files struct {
	Dir string // log directory
	PID string // pid file
	Log string // log file
}

// DefaultFiles derives the files from the server.ini path: logDir (if set),
// else $METAQ_LOG_DIR, else <dir of server.ini>/../logs. pidFile overrides
// the pid file.
//
// MetaQ's layout, conf/server.ini, keeps MetaQ's names (.run.pid and
// metaServer.log). Any other layout names them after the configuration, so
// brokers whose files share a directory (/etc/metaq/bj.ini and
// /etc/metaq/bj-slave.ini), or whose folders are siblings
// (/etc/metaq/bj/server.ini and /etc/metaq/hf/server.ini), each get their
// own: .bj.run.pid and bj.log, .bj-slave.run.pid, .hf.run.pid and so on.
func DefaultFiles(configPath, logDir, pidFile string) Files {
	abs, err := filepath.Abs(configPath)
	if err != nil {
		abs = configPath
	}
	if logDir == "" {
		logDir = os.Getenv("METAQ_LOG_DIR")
	}
	if logDir == "" {
		logDir = filepath.Join(filepath.Dir(abs), "..", "logs")
	}
	logDir = filepath.Clean(logDir)
	pid, log := ".run.pid", "metaServer.log"
	if name := instanceName(abs); name != "" {
		pid, log = "."+name+".run.pid", name+".log"
	}
	f := Files{Dir: logDir, PID: filepath.Join(logDir, pid), Log: filepath.Join(logDir, log)}
	if pidFile != "" {
		f.PID = pidFile
	}
	return f
}

// instanceName is "" for MetaQ's conf/server.ini; otherwise the file's name
// without its extension, or for a server.ini its folder's name.
func instanceName(configPath string) string {
	base := filepath.Base(configPath)
	dir := filepath.Base(filepath.Dir(configPath))
	if base == "server.ini" {
		if dir == "conf" || dir == "." || dir == string(filepath.Separator) {
			return ""
		}
		return dir
	}
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// AdminURL is the base URL of a server's admin endpoint over TCP from its
// config (a wildcard listen address is reached on loopback), "" when the
// config gives the endpoint no TCP address: it is then reached on its unix
// socket, cfg.System.AdminSocket().
func AdminURL(cfg *config.Server) string {
	if cfg.Site.AdminAddr == "" {
		return ""
	}
	if _, _, err := net.SplitHostPort(cfg.Site.AdminAddr); err != nil {
		return ""
	}
	// A wildcard bind is reached on loopback: the command runs on the host.
	return "http://" + hostaddr.Dialable(cfg.Site.AdminAddr, "127.0.0.1")
}

// ProtocolAddr is host:port of a server's MetaQ port as BrokerStatsTool
// reaches it: hostName, or localhost.
func ProtocolAddr(cfg *config.Server) string {
	host := cfg.System.HostName
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(cfg.System.ServerPort))
}
