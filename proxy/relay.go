// The relay stage for bodies of unknown length: copied to the client as
// they arrive, flushed per read, and teed into the assembler (Gemini's
// streamed JSON array); and the stream-writer plumbing every relay uses.

package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/valyala/fasthttp"
)

// relayChunks copies a body of unknown length (such as Gemini's streamed
// JSON array) to the client as it arrives, flushing after every read. For a
// generate stream it also reads the array's elements for the assembler.
func (ex *exchange) relayChunks(w *bufio.Writer) {
	defer ex.closeUpstream()
	cfg := ex.up.cfg
	dog := limiter.NewWatchdog(context.Background(), limiter.Timeouts{Idle: cfg.Timeouts.Idle.D(), Total: cfg.Timeouts.Total.D()})
	tee := &chunkTee{w: w, src: ex.resp.BodyStream(), ex: ex, dog: dog, holdEnd: ex.asm != nil && ex.turn != nil}
	// The clocks and a cancel request close the upstream body, which ends
	// the read in flight; no goroutine waits for them.
	rc := new(relayControl)
	rc.init(ex, nil)
	rc.stopOn(dog.Context(), stopTimeout, func() bool { return dog.Fired() != "" })
	if ex.turn != nil {
		rc.stopOn(ex.turn.cancelCtx, stopCancelled, nil)
	}
	// The outcome is the exchange's (on the heap), and the answer is read
	// into it by a function of its own: the finish's store round trip
	// runs below this frame (see respondWhole).
	o := &ex.final
	o.status = ex.resp.StatusCode()
	if ex.asm != nil {
		ar := adapters.NewArrayReader(tee, ex.s.cfg.Limits.MaxSSELineBytes)
		for {
			_, value, err := ar.Next()
			if err != nil {
				break
			}
			if ex.firstEvent.IsZero() {
				ex.firstEvent = time.Now()
			}
			_ = ex.asm.Feed(value)
		}
		// Whatever the array reader left unread still goes to the client.
		_, _ = io.Copy(io.Discard, tee)
		ex.takeResult()
	} else {
		_, _ = io.Copy(io.Discard, tee)
		if o.status >= 300 {
			o.errBody = tee.head
		}
	}
	why := rc.finish()
	dog.Stop()
	if r := dog.Fired(); r != "" {
		o.reason = string(r)
	}
	if why == stopCancelled {
		o.aborted, o.reason = true, "cancelled"
	}
	if tee.clientGone && !ex.detach {
		o.aborted, o.reason = true, "client_disconnected"
	}
	if ex.conclude(o) != nil && o.turn.Terminal && !o.aborted {
		// The turn is neither stored nor spooled: the array's closing
		// bracket, held back, never goes out, so the client's parser
		// finds the answer cut short rather than whole.
		ex.s.metrics.CountTurnRefused()
		return
	}
	tee.release()
}

// takeResult sets the final outcome's turn to the assembler's.
//
//go:noinline
func (ex *exchange) takeResult() { ex.final.turn = ex.asm.Result() }

// chunkTee forwards every chunk it reads from the upstream to the client
// before handing it to its reader. A client that leaves stops the upstream
// unless the exchange is detached.
type chunkTee struct {
	w          *bufio.Writer
	src        io.Reader
	ex         *exchange
	clientGone bool
	head       []byte // the first bytes, kept for an error body
	dog        *limiter.Watchdog
	// holdEnd: what could be the array's end (a trailing ']' and the
	// whitespace after it) is held back until the turn is recorded, as a
	// stream's last event is; held is what is held.
	holdEnd bool
	held    []byte
}

func (c *chunkTee) Read(p []byte) (int, error) {
	n, err := c.src.Read(p)
	if n > 0 {
		c.dog.Touch()
		if len(c.head) < 64<<10 {
			c.head = append(c.head, p[:n]...)
		}
		if !c.clientGone {
			out := p[:n]
			var werr error
			if c.holdEnd {
				// More came, so what was held was not the end.
				if len(c.held) > 0 {
					_, werr = c.w.Write(c.held)
					c.held = c.held[:0]
				}
				cut := len(bytes.TrimRight(out, " \t\r\n"))
				if cut > 0 && out[cut-1] == ']' {
					c.held = append(c.held, out[cut-1:]...)
					out = out[:cut-1]
				}
			}
			if werr == nil {
				_, werr = c.w.Write(out)
			}
			if werr != nil || c.ex.flush(c.w) != nil {
				c.clientGone = true
				if !c.ex.detach {
					return n, io.ErrUnexpectedEOF
				}
			}
		}
	}
	return n, err
}

// release sends what was held back, once the turn is recorded.
func (c *chunkTee) release() {
	if len(c.held) > 0 && !c.clientGone {
		if _, err := c.w.Write(c.held); err == nil {
			_ = c.ex.flush(c.w)
		}
		c.held = c.held[:0]
	}
}

// flush sends what is buffered to the client (see flushWithin).
func (ex *exchange) flush(w *bufio.Writer) error {
	return flushWithin(w, ex.clientConn, ex.s.cfg.Limits.WriteTimeout.D())
}

// flushWithin flushes a stream's buffered bytes with a write deadline of
// its own: a client that stops reading is cut off, a stream that keeps
// flowing never is (the server's write timeout would cut it as a whole).
func flushWithin(w *bufio.Writer, conn net.Conn, timeout time.Duration) error {
	if conn != nil {
		_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	}
	return w.Flush()
}

// setBodyStreamWriter is ctx.SetBodyStreamWriter without the goroutine and
// the pipe: fasthttp's own connection goroutine runs sw (WriteTo), each
// flush of w going out as one chunk. An open stream then holds one
// goroutine and two 4 KiB buffers less.
func setBodyStreamWriter(ctx *fasthttp.RequestCtx, sw fasthttp.StreamWriter) {
	ctx.Response.SetBodyStream(&bodyWriter{sw: sw}, -1)
}

// bodyWriter is a body stream written by its StreamWriter when fasthttp
// sends it. Read, for a caller that reads the body instead, and Close, for
// a response whose body is never sent, run sw through fasthttp's pipe as
// SetBodyStreamWriter would, so sw always runs exactly once.
type bodyWriter struct {
	sw   fasthttp.StreamWriter
	ran  bool
	pipe io.ReadCloser
	// done, when set, runs after sw has returned in WriteTo (it gives the
	// request's lent body buffer back). sw run through the pipe runs
	// beside fasthttp's own goroutine, so done is skipped there.
	done func()
	out  countingWriter // WriteTo's writer, counted
}

func (b *bodyWriter) SupportsBodyWriteTo() bool { return true }

// WriteTo runs sw. A stream's relay waits in the frames below it, so it
// keeps few locals (see relaySSE).
func (b *bodyWriter) WriteTo(w io.Writer) (int64, error) {
	if b.ran {
		return 0, errBodyConsumed
	}
	b.ran = true
	b.out.w = w
	// Small: the relay flushes after every event (or burst), and a larger
	// write goes through bufio straight to the chunk writer.
	bw := bufio.NewWriterSize(&b.out, 1024)
	b.sw(bw)
	err := bw.Flush()
	if b.done != nil {
		b.done()
	}
	return b.out.n, err
}

var errBodyConsumed = errors.New("proxy: body stream already consumed")

func (b *bodyWriter) Read(p []byte) (int, error) {
	if b.pipe == nil {
		if b.ran {
			return 0, io.EOF
		}
		b.ran = true
		b.pipe = fasthttp.NewStreamReader(b.sw)
	}
	return b.pipe.Read(p)
}

func (b *bodyWriter) Close() error {
	if !b.ran {
		// The body is never sent: sw still runs, and finds the client
		// gone (the closed pipe), as with SetBodyStreamWriter.
		b.ran = true
		b.pipe = fasthttp.NewStreamReader(b.sw)
	}
	if b.pipe != nil {
		return b.pipe.Close()
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
