// Package siterole owns a site bundle's role for its brokerId: master or
// slave, the generation it serves or follows, and the one transition that
// may run at a time (a promotion, a switchover out, a demotion).
//
// The bundle's transition code is the only caller of Begin and Set; every
// other part of the bundle reads the role with Current (or waits for a
// change with Changed) instead of the role it started with. The bundle
// keeps the Machine in its roleOwner, which also starts and stops the
// shipper or receiver a transition runs and answers what runs now.
//
// The decisions a failover takes (is the master lost, which slave site is
// the candidate, may this master acknowledge) are pure functions of
// observed facts in decide.go (unfinished.go: a generation nobody will be
// master of; givenback.go: a master taking back mastership after the raise
// it stepped down for was given back), with no I/O, so that they can be
// tested table by table.
//
// Locks: Machine.mu is a leaf. Nothing is called while it is held.
package siterole
