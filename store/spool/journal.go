package spool

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// Entry kinds.
const (
	opFinish uint8 = 1 + iota
	opEvents
	opStart // a run started while the backend was unreachable
)

// entry is one write the backend could not take, as the journal keeps it.
type entry struct {
	Op    uint8
	Lease store.Lease
	// Finish, for opFinish.
	Finish *store.Finish
	// First and Events, for opEvents.
	First  int64
	Events [][]byte
	// Start, for opStart.
	Start *store.StartRun
	// At is when the write was spooled.
	At time.Time

	size int64 // the record's bytes in the journal (not encoded)
}

// Record framing: a little-endian uint32 payload length, the payload's
// CRC-32C, then the payload (one gob-encoded entry).
const headerSize = 8

// maxRecord bounds one record, so a corrupt length cannot make the reader
// allocate without limit.
const maxRecord = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeRecord frames e as one journal record.
func encodeRecord(e *entry) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(make([]byte, headerSize))
	if err := gob.NewEncoder(&buf).Encode(e); err != nil {
		return nil, fmt.Errorf("spool: encode: %w", err)
	}
	b := buf.Bytes()
	payload := b[headerSize:]
	if len(payload) > maxRecord {
		return nil, fmt.Errorf("spool: a record of %d bytes is larger than %d", len(payload), maxRecord)
	}
	binary.LittleEndian.PutUint32(b[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(payload, castagnoli))
	return b, nil
}

// decodePayload reads one record's payload back into a new entry, whose
// memory is its own.
func decodePayload(payload []byte) (*entry, bool) {
	e := new(entry)
	if err := gob.NewDecoder(bytes.NewReader(payload)).Decode(e); err != nil || e.Op < opFinish || e.Op > opStart ||
		(e.Op == opFinish && e.Finish == nil) || (e.Op == opStart && e.Start == nil) {
		return nil, false
	}
	return e, true
}

// readRecords reads the records of a journal in order. It stops at the
// first record that is cut short or fails its checksum (a write torn by a
// crash, or damage) and reports the offset of the end of the last good
// record, where the journal should be cut.
func readRecords(r io.Reader) (entries []*entry, good int64, err error) {
	br := bufio.NewReader(r)
	var head [headerSize]byte
	for {
		if _, err := io.ReadFull(br, head[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return entries, good, nil
			}
			return entries, good, errTorn
		}
		n := binary.LittleEndian.Uint32(head[0:4])
		sum := binary.LittleEndian.Uint32(head[4:8])
		if n == 0 || n > maxRecord {
			return entries, good, errTorn
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			return entries, good, errTorn
		}
		if crc32.Checksum(payload, castagnoli) != sum {
			return entries, good, errTorn
		}
		e, ok := decodePayload(payload)
		if !ok {
			return entries, good, errTorn
		}
		e.size = int64(headerSize) + int64(n)
		entries = append(entries, e)
		good += e.size
	}
}

// errTorn: the journal ends in a record that is incomplete or damaged.
var errTorn = errors.New("spool: the journal ends in a torn or damaged record")

// journal is the append-only file of spooled writes. Not safe for
// concurrent use; the Store serialises it.
type journal struct {
	path  string
	f     *os.File
	size  int64
	fsync bool
}

const journalName = "journal"

// openJournal opens (or creates) the journal in dir and reads what it
// holds. A torn tail is cut off; torn reports whether there was one.
func openJournal(dir string, fsync bool) (j *journal, entries []*entry, torn bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, false, fmt.Errorf("spool: %w", err)
	}
	path := filepath.Join(dir, journalName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, false, fmt.Errorf("spool: %w", err)
	}
	// One process per journal: two replicas appending to one file, or
	// replaying it both, would interleave their records.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, nil, false, fmt.Errorf("spool: %s is in use by another process (each replica needs a journal of its own): %w", path, err)
	}
	entries, good, rerr := readRecords(f)
	if rerr != nil {
		torn = true
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, nil, false, fmt.Errorf("spool: cutting the torn tail of %s: %w", path, err)
		}
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, false, fmt.Errorf("spool: %w", err)
	}
	return &journal{path: path, f: f, size: good, fsync: fsync}, entries, torn, nil
}

// append writes one record at the journal's end, synced to disk when the
// journal's policy says so. On a failed write the journal is cut back to
// where it was, so a half record never stays behind a good one.
func (j *journal) append(rec []byte) error {
	if _, err := j.f.Write(rec); err != nil {
		_ = j.f.Truncate(j.size)
		_, _ = j.f.Seek(j.size, io.SeekStart)
		return fmt.Errorf("spool: write: %w", err)
	}
	if j.fsync {
		if err := j.f.Sync(); err != nil {
			_ = j.f.Truncate(j.size)
			_, _ = j.f.Seek(j.size, io.SeekStart)
			return fmt.Errorf("spool: fsync: %w", err)
		}
	}
	j.size += int64(len(rec))
	return nil
}

// rewrite replaces the journal with the records of entries (what is still
// to replay): written to a new file, synced, and renamed over the old one.
func (j *journal) rewrite(entries []*entry) error {
	tmp := j.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	var size int64
	for _, e := range entries {
		rec, err := encodeRecord(e)
		if err == nil {
			_, err = f.Write(rec)
		}
		if err != nil {
			f.Close()
			os.Remove(tmp)
			return fmt.Errorf("spool: rewrite: %w", err)
		}
		size += int64(len(rec))
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("spool: rewrite: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("spool: rewrite: %w", err)
	}
	if d, err := os.Open(filepath.Dir(j.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	// The renamed file is the journal now: it takes the lock over before
	// the old one (and its lock) goes.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("spool: locking the rewritten journal: %w", err)
	}
	j.f.Close()
	j.f, j.size = f, size
	_, err = f.Seek(size, io.SeekStart)
	return err
}

func (j *journal) close() error { return j.f.Close() }
