// Command agentgrow is a stand-in for an OpenZiti controller: it embeds the
// real github.com/openziti/agent module (the gops-style IPC agent) and has no
// HTTP pprof listener at all. main.(*raftLog).appendEntries retains every
// entry it appends (-rate bytes per second, each page written so RSS grows),
// and main.(*raftMesh).dial starts a main.watchPeer goroutine (-peers per
// second) that blocks forever. With -rate 0 -peers 0 it is a quiet decoy.
//
// It prints "agent on ADDR" (unix:PATH or tcp:HOST:PORT) once the agent
// listens, then nothing. SIGINT or SIGTERM close the agent (removing its
// socket) and exit; a SIGKILL leaves the socket behind, as an OOM kill does.
// With -restart-after D it restarts itself after D, as a controller does after
// restoring a snapshot: it starts a new copy of itself (same arguments, without
// -restart-after), closes its agent and exits 0.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/openziti/agent"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	appID      = flag.String("app-id", "agentgrow", "the id the agent reports in its app info (op 0x0a)")
	appType    = flag.String("app-type", "controller", "the type the agent reports in its app info")
	appVersion = flag.String("app-version", "0.0.0-test", "the version the agent reports in its app info")
	listenAddr = flag.String("listen-agent", "", "agent address, cli-agent-addr style: unix:/path.sock or tcp:HOST:PORT (default: $TMPDIR/gops-agent.PID.sock)")
	rate       = fixture.BytesFlag("rate", 8<<20, "growth in bytes per second (main.(*raftLog).appendEntries)")
	chunk      = fixture.BytesFlag("chunk", 256<<10, "size of one retained entry")
	peers      = flag.Float64("peers", 20, "leaked main.watchPeer goroutines per second")
	delay      = flag.Duration("delay", 0, "sleep this long before the agent listens (the datastore migration)")
	restart    = flag.Duration("restart-after", 0, "after this long, start a new copy of this process and exit 0")
)

type raftLog struct {
	entries [][]byte // never compacted
	index   int
}

type raftMesh struct {
	peers []chan struct{}
}

var (
	log  raftLog
	mesh raftMesh
)

//go:noinline
func (l *raftLog) appendEntries(size int) {
	l.index++
	e := make([]byte, size)
	fixture.Touch(e, byte(l.index))
	l.entries = append(l.entries, e)
}

//go:noinline
func watchPeer(done chan struct{}) {
	<-done // never closed
}

//go:noinline
func (m *raftMesh) dial() {
	done := make(chan struct{})
	m.peers = append(m.peers, done)
	go watchPeer(done)
}

// address reports where the agent listens, cli-agent-addr style.
func address() string {
	if *listenAddr != "" {
		return *listenAddr
	}
	return "unix:" + filepath.Join(os.TempDir(), fmt.Sprintf("%s.%d.sock", agent.SockPrefix, os.Getpid()))
}

// restartSelf starts a copy of this process without -restart-after (it inherits
// the cgroup, the temp dir and the output files), then exits.
func restartSelf() {
	var args []string
	flag.Visit(func(f *flag.Flag) {
		if f.Name != "restart-after" {
			args = append(args, "-"+f.Name+"="+f.Value.String())
		}
	})
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "restart: %v\n", err)
		os.Exit(1)
	}
	attr := &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}}
	child, err := os.StartProcess(exe, append([]string{exe}, args...), attr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "restart: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("restarting as pid %d\n", child.Pid)
	agent.Close()
	os.Exit(0)
}

func main() {
	fixture.Parse()
	time.Sleep(*delay)
	cleanup := false
	err := agent.Listen(agent.Options{
		Addr:            *listenAddr,
		AppId:           *appID,
		AppType:         *appType,
		AppVersion:      *appVersion,
		ShutdownCleanup: &cleanup,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("agent on %s\n", address())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-stop
		agent.Close()
		os.Exit(0)
	}()

	if *restart > 0 {
		time.AfterFunc(*restart, restartSelf)
	}
	if *peers > 0 {
		every := time.Duration(float64(time.Second) / *peers)
		go func() {
			for range time.Tick(every) {
				mesh.dial()
			}
		}()
	}
	if *rate > 0 {
		fixture.PaceConstant(int64(*rate), max(int(*chunk), 1), log.appendEntries)
	}
	fixture.Forever()
}
