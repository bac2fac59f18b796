// Command mockllm runs the strict mock LLM upstream of package mock as a
// separate process, for demos and for tests that drive a separate binary.
// It prints its base URL and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9999", "address to listen on")
	maxRecorded := flag.Int("max-recorded", 10000, "requests kept in the log (0 = all)")
	flag.Parse()

	s, err := mock.Start(*listen, mock.Options{MaxRecorded: *maxRecorded})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mockllm:", err)
		os.Exit(1)
	}
	fmt.Println(s.URL())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "mockllm:", err)
		os.Exit(1)
	}
}
