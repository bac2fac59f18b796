// Package sse reads Server-Sent Events streams as the proxy receives them
// from an upstream: it splits a byte stream into events without changing a
// byte, so each event can be forwarded and logged exactly as it arrived, and
// it parses each event's data, event and id fields for the assemblers.
//
// It accepts "\n", "\r\n" and "\r" line endings (WHATWG SSE), multi-line
// data, comment lines, and events split across reads. It does not write SSE.
package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// ErrEventTooLong is returned by Reader.Next when one event (or one line)
// grows past the reader's maximum size before its terminating blank line.
var ErrEventTooLong = errors.New("sse: event exceeds maximum size")

// DefaultMaxEventSize bounds one event when NewReader is given 0.
const DefaultMaxEventSize = 8 << 20

// initialBufSize is where the buffer starts: a text delta event is a few
// hundred bytes, and an open stream holds this much until a larger event
// doubles it.
const initialBufSize = 1024

// Kind tells a data-carrying event from the lines that are not events.
type Kind uint8

const (
	// KindEvent is a block with at least one field line (data, event, id,
	// retry or an unknown field), terminated by a blank line.
	KindEvent Kind = iota
	// KindComment is a block of comment lines (": keep-alive"), or a stray
	// blank line with nothing before it. It is not an event in the SSE
	// sense: forward it live, but do not log or count it.
	KindComment
)

// Event is one block of an SSE stream.
//
// Its slices point into the Reader's buffers and are valid only until the
// next call to Next or Reset; copy what must outlive that.
type Event struct {
	// Raw is the exact bytes of the block, including the line terminators
	// and the terminating blank line. Concatenating Raw of every event a
	// Reader returns reproduces its input.
	Raw []byte
	// Data is the value of the data field; several data lines are joined
	// with "\n" as the SSE spec says. Nil when the block has no data line.
	Data []byte
	// Event is the value of the event field, nil when absent.
	Event []byte
	// ID is the value of the id field, nil when absent.
	ID []byte
	// Kind says whether this is an event or a comment/blank block.
	Kind Kind
	// HasData reports whether the block had at least one data line (Data
	// may be empty even when it did: "data:" with no value).
	HasData bool
	// Partial reports that the input ended before the block's terminating
	// blank line. Raw still holds every remaining byte. Per the SSE spec
	// a client discards such a block; the proxy forwards it and should
	// treat the stream as truncated.
	Partial bool
}

// Reader splits an SSE byte stream into events.
//
// Created per stream and reusable with Reset; not safe for concurrent use.
// In the steady state Next does not allocate: it reuses one buffer that grows
// to the largest event seen (bounded by the maximum size).
type Reader struct {
	src     io.Reader
	max     int
	buf     []byte
	start   int // first unconsumed byte
	end     int // end of buffered bytes
	eof     bool
	err     error // sticky read error
	fatal   error // sticky ErrEventTooLong
	dataBuf []byte
	ev      Event
}

// NewReader returns a Reader over src. maxEventSize bounds one event's raw
// size; 0 means DefaultMaxEventSize.
func NewReader(src io.Reader, maxEventSize int) *Reader {
	if maxEventSize <= 0 {
		maxEventSize = DefaultMaxEventSize
	}
	return &Reader{src: src, max: maxEventSize}
}

// Reset makes the Reader read a new stream, keeping its buffers.
func (r *Reader) Reset(src io.Reader) {
	r.src = src
	r.start, r.end = 0, 0
	r.eof = false
	r.err = nil
	r.fatal = nil
	r.ev = Event{}
}

// Next returns the next block of the stream. It returns io.EOF after the
// last block, ErrEventTooLong when a block exceeds the maximum size, or the
// underlying reader's error (after handing back any partial block). The
// returned Event is valid until the next call.
func (r *Reader) Next() (*Event, error) {
	if r.fatal != nil {
		return nil, r.fatal
	}
	if r.start == r.end {
		r.start, r.end = 0, 0
	}
	// Phase 1: find the end of the block (its blank line) without parsing,
	// so that buffer compaction cannot invalidate parsed slices.
	off := 0 // scan position relative to r.start
	var blockEnd int
	partial := false
	for {
		lineEnd, next, ok := r.findLine(r.start + off)
		if ok {
			if lineEnd == r.start+off {
				blockEnd = next
				break
			}
			off = next - r.start
			continue
		}
		if r.eof || r.err != nil {
			if r.start == r.end {
				if r.err != nil {
					return nil, r.err
				}
				return nil, io.EOF
			}
			blockEnd = r.end
			partial = true
			break
		}
		if err := r.fill(); err != nil {
			r.fatal = err
			return nil, err
		}
	}
	return r.parse(blockEnd, partial), nil
}

// parse parses the block from r.start to blockEnd in place (Next's second
// phase). It is a function of its own so that Next's frame, which a relay
// waits in while fill reads, stays small: the runtime shrinks a waiting
// goroutine's stack only when it uses under a quarter of it.
//
//go:noinline
func (r *Reader) parse(blockEnd int, partial bool) *Event {
	ev := &r.ev
	*ev = Event{Raw: r.buf[r.start:blockEnd], Partial: partial}
	r.dataBuf = r.dataBuf[:0]
	dataLines := 0
	var firstData []byte
	fields := false
	pos := r.start
	for pos < blockEnd {
		lineEnd, next, ok := r.findLine(pos)
		if !ok || next > blockEnd {
			lineEnd, next = blockEnd, blockEnd
		}
		if lineEnd > pos {
			r.parseLine(ev, r.buf[pos:lineEnd], &fields, &dataLines, &firstData)
		}
		pos = next
	}
	r.finish(ev, fields, dataLines, firstData)
	r.start = blockEnd
	return ev
}

// finish fills the derived fields of ev once its block is complete.
func (r *Reader) finish(ev *Event, fields bool, dataLines int, firstData []byte) {
	if fields {
		ev.Kind = KindEvent
	} else {
		ev.Kind = KindComment
	}
	switch dataLines {
	case 0:
	case 1:
		ev.Data = firstData
		ev.HasData = true
	default:
		ev.Data = r.dataBuf
		ev.HasData = true
	}
}

// parseLine records one non-blank line of a block.
func (r *Reader) parseLine(ev *Event, line []byte, fields *bool, dataLines *int, firstData *[]byte) {
	if line[0] == ':' {
		return // comment
	}
	*fields = true
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	if value == nil {
		value = line[len(line):]
	}
	switch string(name) {
	case "data":
		*dataLines++
		switch *dataLines {
		case 1:
			*firstData = value
		case 2:
			r.dataBuf = append(r.dataBuf, *firstData...)
			fallthrough
		default:
			r.dataBuf = append(r.dataBuf, '\n')
			r.dataBuf = append(r.dataBuf, value...)
		}
	case "event":
		ev.Event = value
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			ev.ID = value
		}
	}
}

// findLine looks for a line terminator at or after from. It returns the end
// of the line's content, the index after its terminator, and whether a
// complete line was found. A "\r" as the last buffered byte is not yet a
// complete terminator unless the input has ended, since "\n" may follow.
func (r *Reader) findLine(from int) (lineEnd, next int, ok bool) {
	b := r.buf[from:r.end]
	i := bytes.IndexAny(b, "\r\n")
	if i < 0 {
		return 0, 0, false
	}
	if b[i] == '\n' {
		return from + i, from + i + 1, true
	}
	// '\r'
	if i+1 < len(b) {
		if b[i+1] == '\n' {
			return from + i, from + i + 2, true
		}
		return from + i, from + i + 1, true
	}
	if r.eof {
		return from + i, from + i + 1, true
	}
	return 0, 0, false
}

// fill reads more input, compacting and growing the buffer as needed.
func (r *Reader) fill() error {
	if r.start > 0 {
		// Compact: keep the unconsumed block at the front. Line scanning
		// restarts from r.start, which is cheap compared to reading.
		n := copy(r.buf, r.buf[r.start:r.end])
		r.end = n
		r.start = 0
	}
	if r.end == len(r.buf) {
		if err := r.grow(); err != nil {
			return err
		}
	}
	for tries := 0; tries < 100; tries++ {
		n, err := r.src.Read(r.buf[r.end:])
		r.end += n
		if err != nil {
			r.ended(err)
			return nil
		}
		if n > 0 {
			return nil
		}
	}
	r.err = io.ErrNoProgress
	return nil
}

// ended records the error that ended reading (apart from fill, as grow).
//
//go:noinline
func (r *Reader) ended(err error) {
	if errors.Is(err, io.EOF) {
		r.eof = true
	} else {
		r.err = err
	}
}

// grow doubles the full buffer, up to the maximum block size. It is apart
// from fill so that fill's frame stays small (see parse).
//
//go:noinline
func (r *Reader) grow() error {
	if len(r.buf) >= r.max {
		return fmt.Errorf("%w (limit %d bytes)", ErrEventTooLong, r.max)
	}
	size := 2 * len(r.buf)
	if size < initialBufSize {
		size = initialBufSize
	}
	if size > r.max {
		size = r.max
	}
	nb := make([]byte, size)
	copy(nb, r.buf[:r.end])
	r.buf = nb
	return nil
}

// Buffered reports whether a whole next block is already buffered, so that
// Next would return it without reading. A relay uses it to send a burst of
// events with one flush, without holding any event back.
func (r *Reader) Buffered() bool {
	pos := r.start
	for {
		lineEnd, next, ok := r.findLine(pos)
		if !ok {
			return false
		}
		if lineEnd == pos {
			return true
		}
		pos = next
	}
}
