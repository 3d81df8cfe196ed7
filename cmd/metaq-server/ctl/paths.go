package ctl

import (
	"net"
	"os"
	"path/filepath"
	"strconv"

	"metaq/broker/config"
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
func DefaultFiles(configPath, logDir, pidFile string) Files {
	if logDir == "" {
		logDir = os.Getenv("METAQ_LOG_DIR")
	}
	if logDir == "" {
		abs, err := filepath.Abs(configPath)
		if err != nil {
			abs = configPath
		}
		logDir = filepath.Join(filepath.Dir(abs), "..", "logs")
	}
	logDir = filepath.Clean(logDir)
	f := Files{Dir: logDir, PID: filepath.Join(logDir, ".run.pid"), Log: filepath.Join(logDir, "metaServer.log")}
	if pidFile != "" {
		f.PID = pidFile
	}
	return f
}

// AdminURL is the base URL of a server's admin endpoint from its config
// (a wildcard listen address is reached on loopback).
func AdminURL(cfg *config.Server) string {
	host, port, err := net.SplitHostPort(cfg.Site.AdminAddr)
	if err != nil {
		host, port = "127.0.0.1", strconv.Itoa(cfg.System.ServerPort+2)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
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
