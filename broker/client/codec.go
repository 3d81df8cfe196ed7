package client

import (
	"bufio"
	"errors"
	"fmt"

	"metaq/broker/wire"
)

// frame is one response from a broker: a `result` (status code and text
// body) or a `value` (raw record bytes answering a get, code 200).
type frame struct {
	value  bool
	code   int
	body   []byte
	opaque int32
}

// codec encodes the requests the client sends and reads response frames.
// The connection layer sees only this interface; wireCodec puts the
// project's broker/wire package behind it.
type codec interface {
	appendPut(dst []byte, topic string, partition int, body []byte, flag, sum int32, opaque int32) []byte
	appendGet(dst []byte, topic, group string, partition int, offset int64, maxSize int, opaque int32) []byte
	appendOffset(dst []byte, topic, group string, partition int, offset int64, opaque int32) []byte
	appendVersion(dst []byte, opaque int32) []byte
	// newReader returns a function that reads the next response frame from br.
	newReader(br *bufio.Reader, maxBody int) func() (frame, error)
}

// errBadFrame marks a response the client cannot use; the connection is
// closed because framing is lost.
var errBadFrame = errors.New("client: bad response frame")

// wireCodec is the MetaQ 1.4.6 protocol as broker/wire implements it. Puts
// use the 1.4.4+ 7-field form with a checksum.
type wireCodec struct{}

func (wireCodec) appendPut(dst []byte, topic string, partition int, body []byte, flag, sum int32, opaque int32) []byte {
	c := wire.Put{Topic: topic, Partition: int32(partition), Flag: flag, Checksum: sum, Opaque: opaque, Body: body}
	return c.AppendTo(dst)
}

func (wireCodec) appendGet(dst []byte, topic, group string, partition int, offset int64, maxSize int, opaque int32) []byte {
	c := wire.Get{Topic: topic, Group: group, Partition: int32(partition), Offset: offset, MaxSize: int32(maxSize), Opaque: opaque}
	return c.AppendTo(dst)
}

func (wireCodec) appendOffset(dst []byte, topic, group string, partition int, offset int64, opaque int32) []byte {
	c := wire.Offset{Topic: topic, Group: group, Partition: int32(partition), Offset: offset, Opaque: opaque}
	return c.AppendTo(dst)
}

func (wireCodec) appendVersion(dst []byte, opaque int32) []byte {
	c := wire.Version{Opaque: opaque, HasOpaque: true}
	return c.AppendTo(dst)
}

func (wireCodec) newReader(br *bufio.Reader, maxBody int) func() (frame, error) {
	d := wire.NewDecoder(br)
	d.MaxBodySize = maxBody
	d.Reuse = true // a result's fields are copied into the frame at once
	return func() (frame, error) {
		cmd, err := d.Decode()
		if err != nil {
			return frame{}, err
		}
		switch c := cmd.(type) {
		case *wire.Result:
			return frame{code: c.Code, body: c.Body, opaque: c.Opaque}, nil
		case *wire.Value:
			return frame{value: true, code: 200, body: c.Data, opaque: c.Opaque}, nil
		}
		return frame{}, fmt.Errorf("%w: unexpected %s from broker", errBadFrame, cmd.Name())
	}
}
