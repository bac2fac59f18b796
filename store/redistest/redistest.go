// Package redistest starts throwaway redis-server processes for tests: a
// single node or a Redis Cluster of several masters, each on free loopback
// ports, in its own temporary directory, killed when the test ends.
//
// Tests never touch a shared Redis: each gets servers of its own, which it may
// also kill on purpose to test faults. Where no redis-server binary exists the
// test is skipped with a clear message, except under CI=true, where a missing
// server is a failure (a green CI must not hide an untested backend).
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process started for a test.
type Server struct {
	Addr string // host:port on 127.0.0.1
	Dir  string // its working directory

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// bin, port and args start it again (Restart).
	bin  string
	port int
	args []string
	lead []string
}

// URL is the server's redis:// URL for database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Kill stops the server with SIGKILL and waits for it to exit. It is safe to
// call more than once.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// binary returns the redis-server path, skipping (or, under CI=true,
// failing) the test when there is none.
func binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redistest: redis-server not found on PATH; CI=true requires it (apt-get install redis-server)")
		}
		t.Skipf("redistest: redis-server not found on PATH; install redis-server to run this test")
	}
	return path
}

// freePort asks the kernel for a free loopback port.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start starts one redis-server with no persistence on a free port and
// returns once it accepts connections. Extra arguments are passed to
// redis-server (for example "--appendonly", "yes").
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	bin := binary(t)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(t, bin, freePort(t), extraArgs)
		if err == nil {
			t.Cleanup(s.Kill)
			return s
		}
		lastErr = err // most likely the port was taken between probe and bind
	}
	t.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

func start(t testing.TB, bin string, port int, extraArgs []string) (*Server, error) {
	return startIn(bin, t.TempDir(), port, extraArgs)
}

// Sentinel is a master, one replica and three sentinels watching them
// (quorum 2), started for a test: a failover setup on free ports.
type Sentinel struct {
	Master    *Server
	Replica   *Server
	Sentinels []*Server
	// Name is the master's name the sentinels monitor.
	Name string
}

// URL is the redis+sentinel:// URL chronicle's config takes for it.
func (s *Sentinel) URL() string {
	addrs := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		addrs[i] = n.Addr
	}
	return "redis+sentinel://" + strings.Join(addrs, ",") + "/" + s.Name
}

// StartSentinel starts a master and a replica (with extraArgs, e.g. AOF
// settings) and three sentinels that fail the master over after 500 ms of
// silence. It returns once the replica is in sync and every sentinel
// knows the master, its replica and the other sentinels.
func StartSentinel(t testing.TB, extraArgs ...string) *Sentinel {
	t.Helper()
	bin := binary(t)
	s := &Sentinel{Name: "chronicle"}
	s.Master = Start(t, extraArgs...)
	_, mport, _ := net.SplitHostPort(s.Master.Addr)
	s.Replica = Start(t, append([]string{"--replicaof", "127.0.0.1", mport}, extraArgs...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: s.Replica.Addr})
	defer rc.Close()
	waitUntil(t, ctx, "the replica to sync", func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	for i := 0; i < 3; i++ {
		var n *Server
		var lastErr error
		for attempt := 0; attempt < 5 && n == nil; attempt++ {
			dir := t.TempDir()
			port := freePort(t)
			conf := filepath.Join(dir, "sentinel.conf")
			text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
				"sentinel monitor %s 127.0.0.1 %s 2\nsentinel down-after-milliseconds %s 500\n"+
				"sentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
				port, dir, s.Name, mport, s.Name, s.Name, s.Name)
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			n, lastErr = startWith(bin, dir, port, []string{conf, "--sentinel"}, nil)
		}
		if n == nil {
			t.Fatalf("redistest: start a sentinel: %v", lastErr)
		}
		t.Cleanup(n.Kill)
		s.Sentinels = append(s.Sentinels, n)
	}
	for _, n := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.Addr})
		waitUntil(t, ctx, "sentinel "+n.Addr+" to know the setup", func() bool {
			rs, err1 := sc.Replicas(ctx, s.Name).Result()
			ss, err2 := sc.Sentinels(ctx, s.Name).Result()
			return err1 == nil && err2 == nil && len(rs) == 1 && len(ss) == 2
		})
		sc.Close()
	}
	return s
}

// waitUntil polls cond (an external process's state, which can only be
// observed by asking it) until it holds or ctx ends.
func waitUntil(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("redistest: waiting for %s: %v", what, ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart starts a killed server again on its port and in its directory,
// with its arguments, so it loads what it persisted (an AOF, say), and
// returns once it accepts connections. The port may have been taken in
// the meantime; the test then fails.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	n, err := startWith(s.bin, s.Dir, s.port, s.lead, s.args)
	if err != nil {
		t.Fatalf("redistest: restart redis-server: %v", err)
	}
	s.mu.Lock()
	s.cmd, s.done = n.cmd, n.done
	s.mu.Unlock()
}

func startIn(bin, dir string, port int, extraArgs []string) (*Server, error) {
	return startWith(bin, dir, port, nil, extraArgs)
}

// startWith starts redis-server with lead (a config file, say) before its
// own arguments and extraArgs after them.
func startWith(bin, dir string, port int, lead, extraArgs []string) (*Server, error) {
	args := append(append([]string(nil), lead...),
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", "",
		"--daemonize", "no",
		"--protected-mode", "no",
	)
	args = append(args, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, cmd: cmd, done: make(chan struct{}),
		bin: bin, port: port, args: extraArgs, lead: lead}
	ready := make(chan struct{})
	var tail []string
	var tailMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			tailMu.Lock()
			if len(tail) < 40 {
				tail = append(tail, line)
			}
			tailMu.Unlock()
			if !signalled && (strings.Contains(line, "Ready to accept connections") || strings.Contains(line, "+monitor master")) {
				signalled = true
				close(ready)
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(s.done) }()
	select {
	case <-ready:
		return s, nil
	case <-s.done:
		tailMu.Lock()
		defer tailMu.Unlock()
		return nil, fmt.Errorf("redis-server on port %d exited before it was ready:\n%s", port, strings.Join(tail, "\n"))
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-s.done
		return nil, fmt.Errorf("redis-server on port %d not ready after 20s", port)
	}
}

// Cluster is a Redis Cluster of masters started for a test, with the hash
// slots split evenly between them and no replicas.
type Cluster struct {
	Nodes []*Server
}

// Addrs lists every node's address, for redis.ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// URL is a redis:// URL naming every node (the form chronicle's config takes
// for a cluster: redis://host1:port1,host2:port2/?cluster=true is not
// standard, so callers usually build options from Addrs instead).
func (c *Cluster) URL() string {
	return "redis://" + strings.Join(c.Addrs(), ",")
}

// StartCluster starts masters redis-server processes in cluster mode, joins
// them, assigns the 16384 slots in equal ranges and returns once every node
// reports cluster_state:ok.
//
// Extra arguments are passed to every node (for example "--appendonly",
// "yes", so that a node restarted with Restart keeps its data).
func StartCluster(t testing.TB, masters int, extraArgs ...string) *Cluster {
	t.Helper()
	if masters < 1 {
		masters = 3
	}
	c := &Cluster{}
	for i := 0; i < masters; i++ {
		c.Nodes = append(c.Nodes, Start(t, append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		}, extraArgs...)...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	per := 16384 / masters
	for i, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = 16383
		}
		if err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			cl.Close()
			t.Fatalf("redistest: cluster addslots on %s: %v", n.Addr, err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(c.Nodes[0].Addr)
			if err := cl.Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
				cl.Close()
				t.Fatalf("redistest: cluster meet from %s: %v", n.Addr, err)
			}
		}
		cl.Close()
	}
	// Gossip converges on its own; readiness of an external process can only
	// be observed by asking it, so poll CLUSTER INFO with a short backoff.
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", masters)) {
				break
			}
			if ctx.Err() != nil {
				cl.Close()
				t.Fatalf("redistest: cluster on %s not ok after 60s: %v %s", n.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	return c
}

// Client returns a go-redis client for the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// ClusterClient returns a go-redis cluster client, closed when the test ends.
func (c *Cluster) ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Pause stops the server with SIGSTOP: it keeps its connections and its
// port but answers nothing (a hung server) until Resume. Kill still ends
// it.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP)
}

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT)
}

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		t.Fatalf("redistest: signal %v: the server on %s was killed", sig, s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: signal %v to the server on %s: %v", sig, s.Addr, err)
	}
}
