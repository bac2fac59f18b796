package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is one process the bench started: its stderr (and stdout, unless a
// reader claims it) is drained into a short tail kept for error messages.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}

	mu   sync.Mutex
	tail []string
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) keep(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tail = append(c.tail, line)
	if len(c.tail) > 20 {
		c.tail = c.tail[len(c.tail)-20:]
	}
}

// lastLines is the end of the child's output, for error messages.
func (c *child) lastLines() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "\n")
}

// stop asks the child to end (SIGTERM), then kills it after a grace period.
func (c *child) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// starter starts children, optionally pinned to cores with taskset.
type starter struct {
	embeddedFsync string // store.fsync of embedded chronicles
	encryptionKey string // store.encryption.key (base64) when --encryption; "" off
	pin           bool
	taskset       string
	nextCore      int
	ncpu          int
	children      []*child
}

// core returns the taskset prefix for the next proxy process: cores are
// handed out from the last one down, so the client and mock keep core 0.
func (s *starter) core() string {
	if !s.pin || s.taskset == "" || s.ncpu < 2 {
		return ""
	}
	c := s.ncpu - 1 - s.nextCore%(s.ncpu-1)
	s.nextCore++
	return strconv.Itoa(c)
}

// start runs bin with args (pinned to core when core != ""). When lines is
// non-nil, every stdout and stderr line is also sent to it until the
// context of the first match ends; lines are always drained.
func (s *starter) start(name, core, bin string, args []string, lines chan<- string) (*child, error) {
	if core != "" {
		args = append([]string{"-c", core, bin}, args...)
		bin = s.taskset
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	var wg sync.WaitGroup
	drain := func(r io.Reader) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.keep(line)
			if lines != nil {
				select {
				case lines <- line:
				default:
				}
			}
		}
	}
	wg.Add(2)
	go drain(stdout)
	go drain(stderr)
	go func() {
		wg.Wait()
		_ = cmd.Wait()
		close(c.done)
	}()
	s.children = append(s.children, c)
	return c, nil
}

// stopAll stops every child, newest first.
func (s *starter) stopAll() {
	for i := len(s.children) - 1; i >= 0; i-- {
		s.children[i].stop()
	}
}

// waitLine waits for a line matching re from c and returns its first
// submatch.
func waitLine(c *child, lines <-chan string, re *regexp.Regexp, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		select {
		case l := <-lines:
			if m := re.FindStringSubmatch(l); m != nil {
				return m[1], nil
			}
		case <-c.done:
			return "", fmt.Errorf("%s exited before it was ready:\n%s", c.name, c.lastLines())
		case <-deadline:
			return "", fmt.Errorf("%s not ready after %s:\n%s", c.name, timeout, c.lastLines())
		}
	}
}

var (
	reURL       = regexp.MustCompile(`^(http://\S+)$`)
	reListening = regexp.MustCompile(`msg="chronicle listening".*\baddr=(\S+)`)
)

// repoRoot finds the module root from the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory; run from the chronicle repo or pass --chronicle-bin and --mockllm-bin")
		}
		dir = parent
	}
}

// buildBinaries builds the commands that were not given, in parallel.
func buildBinaries(dir string, chronicle, mockllm *string, needChronicle bool) error {
	type job struct{ pkg, out string }
	var jobs []job
	if *chronicle == "" && needChronicle {
		*chronicle = filepath.Join(dir, "chronicle")
		jobs = append(jobs, job{"./cmd/chronicle", *chronicle})
	}
	if *mockllm == "" {
		*mockllm = filepath.Join(dir, "mockllm")
		jobs = append(jobs, job{"./cmd/mockllm", *mockllm})
	}
	if len(jobs) == 0 {
		return nil
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			cmd := exec.Command("go", "build", "-o", j.out, j.pkg)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("go build %s: %v\n%s", j.pkg, err, out)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startMock starts mockllm and returns it with its base URL.
func (s *starter) startMock(bin string) (*child, string, error) {
	lines := make(chan string, 64)
	core := ""
	if s.pin && s.taskset != "" && s.ncpu >= 2 {
		core = "0"
	}
	c, err := s.start("mockllm", core, bin, []string{"-listen", "127.0.0.1:0", "-max-recorded", "8"}, lines)
	if err != nil {
		return nil, "", err
	}
	u, err := waitLine(c, lines, reURL, 10*time.Second)
	return c, u, err
}

// startRedis starts a private redis-server without persistence.
func (s *starter) startRedis(dir string) (*child, string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", errors.New("redis-server not on PATH")
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	c, err := s.start("redis-server", "", bin, []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "yes"}, nil)
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if redisPing(addr) == nil {
			return c, addr, nil
		}
		select {
		case <-c.done:
			return nil, "", fmt.Errorf("redis-server exited:\n%s", c.lastLines())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, "", fmt.Errorf("redis-server not ready:\n%s", c.lastLines())
		}
	}
}

func redisPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "+PONG") {
		return fmt.Errorf("redis answered %q", buf[:n])
	}
	return nil
}

// chronicleConfig is the YAML for one chronicle process: a pass-through
// connection and a persisted one, both in front of the mock.
//
// kek, when set, turns encryption at rest on under that key (base64).
func chronicleConfig(mockURL, driver, dataDir, redisURL, fsync string, pprof bool, kek string) string {
	admin := ""
	if pprof {
		admin = "admin:\n  token: " + benchAdminToken + "\n  pprof: true\n"
	}
	if fsync == "" {
		fsync = "interval"
	}
	store := "  driver: embedded\n  path: " + dataDir + "\n  fsync: " + fsync + "\n"
	if driver == "redis" {
		// Each process has a spool journal of its own (a journal is
		// locked by the process that uses it): the streams check's fresh
		// process runs beside the one of the load phases.
		store = "  driver: redis\n  url: " + redisURL + "\n  spool:\n    path: " + filepath.Join(dataDir, "spool") + "\n"
	}
	if kek != "" {
		store += "  encryption:\n    enabled: true\n    key: " + kek + "\n    key_id: bench\n"
	}
	return "listen: 127.0.0.1:0\n" +
		"store:\n" + store + admin +
		"limits:\n  max_body_bytes: 33554432\n  shutdown_timeout: 2s\n" +
		"log:\n  level: info\n" +
		"connections:\n" +
		"  - name: pass\n    provider: openai\n    base_url: " + mockURL + "\n    persist: false\n" +
		"  - name: persist\n    provider: openai\n    base_url: " + mockURL + "\n    persist: true\n"
}

// benchAdminToken guards the chronicle processes' /debug/pprof under
// --cpuprofile; they listen on loopback only, for the run's length.
const benchAdminToken = "chronicle-bench-profiling"

// cpuProfile saves chronicle's CPU profile over the next d (whole seconds)
// to path.
func cpuProfile(root string, d time.Duration, path string) error {
	return fetchProfile(root, "profile", strconv.Itoa(int(d/time.Second)), d, path)
}

// execTrace saves chronicle's execution trace over the next d to path.
func execTrace(root string, d time.Duration, path string) error {
	return fetchProfile(root, "trace", strconv.FormatFloat(d.Seconds(), 'f', 3, 64), d, path)
}

// fetchProfile saves /debug/pprof/<kind>?seconds=<secs> to path.
func fetchProfile(root, kind, secs string, d time.Duration, path string) error {
	req, err := http.NewRequest("GET", root+"/debug/pprof/"+kind+"?seconds="+secs, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	resp, err := (&http.Client{Timeout: d + 30*time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startChronicle writes a config and starts chronicle; it returns the
// listening base URL.
func (s *starter) startChronicle(bin, dir, name, mockURL, driver, redisURL string, pprof bool) (*child, string, error) {
	data := filepath.Join(dir, "data-"+name)
	cfg := filepath.Join(dir, "chronicle-"+name+".yaml")
	if err := os.WriteFile(cfg, []byte(chronicleConfig(mockURL, driver, data, redisURL, s.embeddedFsync, pprof, s.encryptionKey)), 0o600); err != nil {
		return nil, "", err
	}
	lines := make(chan string, 64)
	c, err := s.start("chronicle-"+name, s.core(), bin, []string{"serve", "--config", cfg}, lines)
	if err != nil {
		return nil, "", err
	}
	addr, err := waitLine(c, lines, reListening, 15*time.Second)
	if err != nil {
		return nil, "", err
	}
	return c, "http://" + strings.Trim(addr, `"`), nil
}

// goProxyArg is the hidden subcommand that runs the httputil baseline.
const goProxyArg = "__goproxy"

// runGoProxy is the baseline reverse proxy: Go's httputil.ReverseProxy with
// immediate flushing, printing its URL on stdout.
func runGoProxy(upstream string) int {
	u, err := url.Parse(upstream)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{
		MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true, ForceAttemptHTTP2: false,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("http://" + ln.Addr().String())
	// Full duplex: otherwise net/http's HTTP/1 server closes the request
	// body when the response headers go out, and when the mock answers
	// before the Transport's last read of that body (it checks for
	// excess bytes), the Transport tears the upstream connection down
	// mid-answer: a stream cut short, "use of closed network connection"
	// (golang/go#40747). About 1 stream in 1,000 here.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, MaxHeaderBytes: 1 << 20}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startGoProxy re-executes this binary as the httputil baseline.
func (s *starter) startGoProxy(mockURL string) (*child, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	lines := make(chan string, 64)
	c, err := s.start("go-httputil", s.core(), self, []string{goProxyArg, mockURL}, lines)
	if err != nil {
		return nil, "", err
	}
	u, err := waitLine(c, lines, reURL, 10*time.Second)
	return c, u, err
}

// nginxConfig is a plain streaming reverse proxy to the mock.
func nginxConfig(dir string, port int, mockHost string) string {
	t := func(n string) string { return filepath.Join(dir, "nginx-"+n) }
	return fmt.Sprintf(`worker_processes 1;
worker_rlimit_nofile 20000;
error_log stderr warn;
pid %s;
events { worker_connections 10000; }
http {
  access_log off;
  client_body_temp_path %s;
  proxy_temp_path %s;
  fastcgi_temp_path %s;
  uwsgi_temp_path %s;
  scgi_temp_path %s;
  client_max_body_size 64m;
  client_body_buffer_size 1m;
  upstream mock { server %s; keepalive 512; }
  server {
    listen 127.0.0.1:%d;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 60s;
    }
  }
}
`, t("pid"), t("body"), t("proxy"), t("fastcgi"), t("uwsgi"), t("scgi"), mockHost, port)
}

// startNginx starts nginx in the foreground with a private config.
func (s *starter) startNginx(bin, dir, mockURL string) (*child, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	mu, _ := url.Parse(mockURL)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConfig(dir, port, mu.Host)), 0o600); err != nil {
		return nil, "", err
	}
	c, err := s.start("nginx", s.core(), bin, []string{"-p", dir, "-c", conf, "-g", "daemon off;"}, nil)
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return c, "http://" + addr, nil
		}
		select {
		case <-c.done:
			return nil, "", fmt.Errorf("nginx exited:\n%s", c.lastLines())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, "", fmt.Errorf("nginx not ready:\n%s", c.lastLines())
}

// procTree is pid and its direct children (nginx workers).
func procTree(pid int) []int {
	pids := []int{pid}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return pids
	}
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// clkTck is the kernel's USER_HZ, the unit of utime and stime.
const clkTck = 100

// cpuSeconds is utime+stime of pid and its children processes.
func cpuSeconds(pid int) float64 {
	var ticks int64
	for _, p := range procTree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command name; utime and stime are
		// fields 14 and 15 of the whole line.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 13 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				ticks += u + st
			}
		}
	}
	return float64(ticks) / clkTck
}

// statusKB reads a "Key:  N kB" line of /proc/PID/status, summed over the
// process and its children.
func statusKB(pid int, key string) int64 {
	var total int64
	for _, p := range procTree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+":"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += n
			}
		}
	}
	return total
}

// resetPeakRSS clears VmHWM (echo 5 > clear_refs); false if not allowed.
func resetPeakRSS(pid int) bool {
	ok := true
	for _, p := range procTree(pid) {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p), []byte("5"), 0); err != nil {
			ok = false
		}
	}
	return ok
}
