package main

import (
	"fmt"

	"metaq/cmd/metaq-server/ctl"
	"metaq/internal/bundle"
)

// role prints the role a promotion or a demotion gave this site at run
// time (kept in <dataPath>/replication/identity.json), which overrides the
// start command; -clear removes it while the server is stopped.
func role(c *common) error {
	cfg, err := c.load()
	if err != nil {
		return err
	}
	if !c.clear {
		r, err := bundle.PersistedRole(cfg.System.DataPath)
		if err != nil {
			return err
		}
		if r == nil {
			say("no role recorded: this site starts in the role its start command says")
			return nil
		}
		say("%s of generation %d since %s", r.Name, r.Generation, r.Since.Format("2006-01-02 15:04:05Z07:00"))
		if r.Name == "slave" {
			say("slaveId %d, slaveGroup %s, masterAddress %q", r.SlaveID, r.SlaveGroup, r.MasterAddress)
		}
		say("a start as master or slave takes this role; `metaq-server role -clear -f %s` (server stopped) removes it", c.config)
		return nil
	}
	if pid, err := ctl.ReadPID(c.files().PID); err == nil {
		return fmt.Errorf("the server is running (pid %d): stop it first; a running server records its role again at every change", pid)
	}
	r, err := bundle.ClearPersistedRole(cfg.System.DataPath)
	if err != nil {
		return err
	}
	if r == nil {
		say("no role recorded")
		return nil
	}
	say("removed the recorded role (%s of generation %d): the next start takes the role its command line says", r.Name, r.Generation)
	if r.Name == "slave" {
		say("WARNING: started as master while another site is master of generation %d, this site is a second master until it sees that generation; make it master with `switchover` instead", r.Generation)
	}
	return nil
}
