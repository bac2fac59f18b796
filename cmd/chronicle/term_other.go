//go:build !linux

package main

import "os"

// isTerminal reports whether f is a character device, the nearest portable
// test for a terminal (it also takes /dev/null, where a progress bar does
// no harm).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
