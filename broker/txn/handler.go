package txn

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"metaq/broker"
	"metaq/broker/wire"
)

// PutChecker runs the checks a plain put gets (closed partition, accepted
// topic, partition range, checksum) and returns the refusal, or nil;
// *broker.Broker implements it.
type PutChecker interface {
	CheckPut(cmd *wire.Put) *wire.Result
}

// writeGate is a PutChecker that tells whether the broker refuses writes
// (*broker.Broker).
type writeGate interface {
	WriteRefusal() *broker.Refusal
}

// Handler answers `transaction` commands and transactional puts for a
// broker (it implements broker.TxHandler).
type Handler struct {
	m     *Manager
	check PutChecker
}

var _ broker.TxHandler = (*Handler)(nil)

// NewHandler returns the broker's TxHandler backed by m.
func NewHandler(m *Manager, check PutChecker) *Handler { return &Handler{m: m, check: check} }

func errResult(err error) *wire.Result {
	return wire.NewResult(wire.StatusInternalServerError, err.Error(), 0)
}

// Transaction answers one transaction command (see Transactions in broker/wire/doc.go).
func (h *Handler) Transaction(ctx context.Context, c broker.TxConn, cmd *wire.Transaction) *wire.Result {
	conn := ConnID(c.ID)
	key := cmd.Tx.String()
	ok := wire.NewResult(wire.StatusOK, "", 0)
	switch cmd.Type {
	case wire.TxBegin:
		if err := h.m.Begin(conn, key, time.Duration(cmd.Timeout)*time.Second); err != nil {
			return errResult(err)
		}
		return ok
	case wire.TxEnd:
		return nil
	case wire.TxPrepare:
		refused := ""
		if g, ok := h.check.(writeGate); ok {
			if r := g.WriteRefusal(); r != nil {
				refused = r.Reason
			}
		}
		vote, err := h.m.prepare(conn, key, refused)
		if err != nil {
			return errResult(err)
		}
		return wire.NewResult(wire.StatusOK, strconv.Itoa(vote), 0)
	case wire.TxCommitOnePhase, wire.TxCommitTwoPhase:
		if err := h.m.Commit(ctx, conn, key, cmd.Type == wire.TxCommitOnePhase); err != nil {
			return errResult(err)
		}
		return ok
	case wire.TxRollback:
		if err := h.m.Rollback(conn, key); err != nil {
			return errResult(err)
		}
		return ok
	case wire.TxForget:
		if err := h.m.Forget(key); err != nil {
			return errResult(err)
		}
		return ok
	case wire.TxRecover:
		return wire.NewResult(wire.StatusOK, strings.Join(h.m.Recover(cmd.UniqueQualifier), "\r\n"), 0)
	}
	return wire.NewResult(wire.StatusInternalServerError, "Unknow transaction command type:"+string(cmd.Type), 0)
}

// Put answers a put carrying a transaction key: `<id> <partition> -1`, the
// message being stored only at commit (see Transactions in broker/wire/doc.go).
func (h *Handler) Put(ctx context.Context, c broker.TxConn, cmd *wire.Put) *wire.Result {
	conn := ConnID(c.ID)
	key := cmd.Tx.String()
	// MetaQ looks the transaction up before it looks at the partition.
	if err := h.m.Check(conn, key); err != nil {
		return errResult(err)
	}
	if cmd.Partition == -1 {
		return wire.NewResult(wire.StatusInternalServerError, "Invalid partition for transaction command:-1", 0)
	}
	if res := h.check.CheckPut(cmd); res != nil {
		return res
	}
	id, err := h.m.Put(conn, key, cmd.Topic, int(cmd.Partition), cmd.Flag, cmd.Body)
	if err != nil {
		return errResult(err)
	}
	return wire.NewResult(wire.StatusOK, strconv.FormatInt(id, 10)+" "+strconv.Itoa(int(cmd.Partition))+" -1", 0)
}

// ConnClosed rolls back the connection's local transactions.
func (h *Handler) ConnClosed(c broker.TxConn) { h.m.ConnClosed(ConnID(c.ID)) }

// Check reports whether key names a transaction open for conn, with the
// error MetaQ answers when it does not.
func (m *Manager) Check(conn ConnID, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.getLocked(conn, key)
	var xe *XAError
	if errors.As(err, &xe) && xe.Code == XAErrNotA {
		return errors.New(xe.Msg) // the put path has no XAException prefix
	}
	return err
}
