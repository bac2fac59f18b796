package adapters

import (
	"errors"
	"fmt"
	"io"
)

// ErrElementTooLong is returned by ArrayReader.Next when one element grows
// past the reader's maximum size.
var ErrElementTooLong = errors.New("adapters: JSON array element exceeds maximum size")

// ErrBadArray is returned by ArrayReader.Next when the stream is not a JSON
// array of values.
var ErrBadArray = errors.New("adapters: stream is not a JSON array")

// ArrayReader splits a streamed JSON array (Gemini streamGenerateContent
// without alt=sse) into its elements as they arrive, without decoding them.
//
// Each call to Next returns Raw, every byte consumed for that element (the
// leading "[" or ",", whitespace, and the value), and Value, the element
// itself. After the last element Next returns io.EOF and Tail holds the
// closing bytes ("\n]" and trailing whitespace). Concatenating every Raw and
// the Tail reproduces the input. Slices are valid until the next call. Not
// safe for concurrent use; Reset makes it reusable.
type ArrayReader struct {
	src   io.Reader
	max   int
	buf   []byte
	start int
	end   int
	eof   bool
	err   error
	began bool
	done  bool
	tail  []byte
}

// NewArrayReader returns an ArrayReader over src; maxElement bounds one
// element (0 means 8 MiB).
func NewArrayReader(src io.Reader, maxElement int) *ArrayReader {
	if maxElement <= 0 {
		maxElement = 8 << 20
	}
	return &ArrayReader{src: src, max: maxElement}
}

// Reset makes the reader read a new stream, keeping its buffer.
func (r *ArrayReader) Reset(src io.Reader) {
	*r = ArrayReader{src: src, max: r.max, buf: r.buf, tail: r.tail[:0]}
}

// Tail returns the bytes after the last element, once Next returned io.EOF.
func (r *ArrayReader) Tail() []byte { return r.tail }

// Next returns the next element.
func (r *ArrayReader) Next() (raw, value []byte, err error) {
	if r.done {
		return nil, nil, io.EOF
	}
	if r.start == r.end {
		r.start, r.end = 0, 0
	}
	off := 0 // relative to r.start
	state := 0
	// state 0: expecting "[" (first) or "," / "]"; 1: expecting a value;
	// 2: inside a value.
	if !r.began {
		state = -1
	}
	valStart, depth, inStr, esc := 0, 0, false, false
	for {
		for ; r.start+off < r.end; off++ {
			c := r.buf[r.start+off]
			switch state {
			case -1, 0:
				if isSpace(c) {
					continue
				}
				switch {
				case state == -1 && c == '[':
					r.began = true
					state = 1
				case state == 0 && c == ',':
					state = 1
				case state == 0 && c == ']':
					return nil, nil, r.finish()
				default:
					return nil, nil, fmt.Errorf("%w: unexpected %q", ErrBadArray, c)
				}
			case 1:
				if isSpace(c) {
					continue
				}
				if c == ']' {
					return nil, nil, r.finish()
				}
				state = 2
				valStart = off
				off-- // re-read c in state 2
			case 2:
				if inStr {
					switch {
					case esc:
						esc = false
					case c == '\\':
						esc = true
					case c == '"':
						inStr = false
					}
					continue
				}
				if depth == 0 && off > valStart && (c == ',' || c == ']' || isSpace(c)) {
					// The end of a scalar element.
					raw = r.buf[r.start : r.start+off]
					value = r.buf[r.start+valStart : r.start+off]
					r.start += off
					r.began = true
					return raw, value, nil
				}
				switch c {
				case '"':
					inStr = true
				case '{', '[':
					depth++
				case '}', ']':
					depth--
					if depth < 0 {
						return nil, nil, fmt.Errorf("%w: unbalanced %q", ErrBadArray, c)
					}
					if depth == 0 {
						raw = r.buf[r.start : r.start+off+1]
						value = r.buf[r.start+valStart : r.start+off+1]
						r.start += off + 1
						return raw, value, nil
					}
				}
			}
		}
		if r.eof || r.err != nil {
			if r.err != nil {
				return nil, nil, r.err
			}
			if r.start == r.end && !r.began {
				r.done = true
				return nil, nil, io.EOF
			}
			return nil, nil, fmt.Errorf("%w: %w", ErrBadArray, io.ErrUnexpectedEOF)
		}
		if err := r.fill(); err != nil {
			return nil, nil, err
		}
	}
}

func (r *ArrayReader) finish() error {
	r.done = true
	r.tail = append(r.tail[:0], r.buf[r.start:r.end]...)
	for {
		if r.eof || r.err != nil {
			break
		}
		r.start = r.end
		if err := r.fill(); err != nil {
			return err
		}
		r.tail = append(r.tail, r.buf[r.start:r.end]...)
	}
	r.start = r.end
	return io.EOF
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

func (r *ArrayReader) fill() error {
	if r.start > 0 {
		n := copy(r.buf, r.buf[r.start:r.end])
		r.end, r.start = n, 0
	}
	if r.end == len(r.buf) {
		if len(r.buf) >= r.max {
			r.err = fmt.Errorf("%w (limit %d bytes)", ErrElementTooLong, r.max)
			return r.err
		}
		size := max(2*len(r.buf), 4096)
		size = min(size, r.max)
		nb := make([]byte, size)
		copy(nb, r.buf[:r.end])
		r.buf = nb
	}
	for tries := 0; tries < 100; tries++ {
		n, err := r.src.Read(r.buf[r.end:])
		r.end += n
		if err != nil {
			if errors.Is(err, io.EOF) {
				r.eof = true
			} else {
				r.err = err
			}
			return nil
		}
		if n > 0 {
			return nil
		}
	}
	r.err = io.ErrNoProgress
	return nil
}
