// pyroscope-receiver serves Grafana Pyroscope's push API (push.v1.PusherService/Push) with
// the connect handler generated in Pyroscope's own module, decodes every profile it is sent
// with github.com/google/pprof/profile, and appends one JSON line per event to -out: what a
// test of `heapwatch push` reads back. It is its own Go module so the fixture programs of
// ../cmd stay light.
//
// Like a real Pyroscope with its defaults, it refuses profiles whose timestamp lies outside
// the ingestion window (older than -reject-older-than, newer than -reject-newer-than) with
// connect's invalid_argument (HTTP 400) and Pyroscope's wording; -window-start UNIX_MS puts
// the start of that window at a fixed time instead, so a test can refuse part of a recorded
// run whatever the day it runs on.
//
// Like Pyroscope v2, which answers a push once the segment holding it is flushed (every 500 ms
// by default), it can take its time: -delay D judges a push, waits D, then stores it and
// answers, storing it even if the client has given up by then; -answer-after D stores it at
// once and answers D later, whether or not the client still waits (a server that stores and
// then answers late). An "arrived" event is written as each push reaches the handler (with
// its number of profiles); every event names its request (a count from 1) and how many
// requests were being handled when it arrived.
//
// Faults on command, from the -fault flag at start or a line on stdin at any time:
//
//	ok               answer normally
//	fail STATUS N    answer the next N pushes with STATUS (a plain-text body, as a proxy would)
//	hang N           hold the next N pushes without an answer until the client gives up
//	reset N          close the connection of the next N pushes without an answer
//
// N may be "all". Each stdin command is acknowledged with "ack K: COMMAND" on stdout, K
// counting from 1. SIGTERM shuts down gracefully: pushes being answered are finished first,
// as in a rolling restart. The first stdout line is "listening on ADDR", printed once the
// socket (and, with -tls DIR, ca.pem in DIR) is ready.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
)

var (
	listen          = flag.String("listen", "127.0.0.1:0", "address to listen on (loopback)")
	out             = flag.String("out", "", "file to append one JSON line per event to (required)")
	rejectOlder     = flag.Duration("reject-older-than", time.Hour, "refuse profiles older than this (0: no limit); Pyroscope's default is 1h")
	rejectNewer     = flag.Duration("reject-newer-than", 10*time.Minute, "refuse profiles newer than now plus this (0: no limit); Pyroscope's default is 10m")
	windowStart     = flag.Int64("window-start", 0, "unix ms where the ingestion window starts, in place of -reject-older-than")
	requireHeader   = flag.String("require-header", "", `"Name: value" every push must carry, else 401`)
	tlsDir          = flag.String("tls", "", "serve HTTPS with a throw-away CA, written to DIR/ca.pem")
	initialFault    = flag.String("fault", "ok", "the fault in force at start, as a stdin command")
	readBodyTimeout = flag.Duration("read-timeout", 30*time.Second, "http.Server ReadTimeout")
	keep            = flag.String("keep", "", "write each accepted profile's raw bytes to DIR/SHA256")
	delay           = flag.Duration("delay", 0, "wait this long before storing and answering each accepted push (Pyroscope v2: 500ms), storing it even if the client has gone")
	answerAfter     = flag.Duration("answer-after", 0, "store each accepted push at once and answer this long after")
)

// fault is the behaviour in force for the next pushes.
type fault struct {
	mode   string // ok, fail, hang, reset
	status int
	left   int // pushes it still applies to; -1 for all
}

type receiver struct {
	mu       sync.Mutex
	current  fault
	log      *os.File
	logMu    sync.Mutex
	requests atomic.Int64
	inFlight atomic.Int64
}

// event is one line of -out.
type event struct {
	Event      string            `json:"event"` // arrived, accepted, refused, fault
	UnixMs     int64             `json:"unix_ms"`
	Fault      string            `json:"fault,omitempty"`
	Status     int               `json:"status,omitempty"`
	Tenant     string            `json:"tenant,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	ID         string            `json:"id,omitempty"`
	SHA256     string            `json:"sha256,omitempty"`
	Bytes      int               `json:"bytes,omitempty"`
	TimeNanos  int64             `json:"time_nanos,omitempty"`
	Totals     map[string]int64  `json:"totals,omitempty"`
	Message    string            `json:"message,omitempty"`
	SampleType []string          `json:"sample_types,omitempty"`
	Request    int64             `json:"request,omitempty"`
	InFlight   int64             `json:"in_flight,omitempty"`
	Profiles   int               `json:"profiles,omitempty"`
}

func (r *receiver) write(e event) {
	e.UnixMs = time.Now().UnixMilli()
	line, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	// One write per line: a reader never sees half an event.
	if _, err := r.log.Write(append(line, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "pyroscope-receiver: writing", *out, ":", err)
		os.Exit(1)
	}
}

func parseFault(words []string) (fault, error) {
	count := func(s string) (int, error) {
		if s == "all" {
			return -1, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bad count %q", s)
		}
		return n, nil
	}
	switch {
	case len(words) == 1 && words[0] == "ok":
		return fault{mode: "ok"}, nil
	case len(words) == 3 && words[0] == "fail":
		status, err := strconv.Atoi(words[1])
		if err != nil || status < 400 || status > 599 {
			return fault{}, fmt.Errorf("bad status %q", words[1])
		}
		n, err := count(words[2])
		return fault{mode: "fail", status: status, left: n}, err
	case len(words) == 2 && (words[0] == "hang" || words[0] == "reset"):
		n, err := count(words[1])
		return fault{mode: words[0], left: n}, err
	}
	return fault{}, fmt.Errorf("unknown command %q", strings.Join(words, " "))
}

// take returns the fault for this push and counts it down.
func (r *receiver) take() fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.current
	if f.mode == "ok" {
		return f
	}
	if f.left > 0 {
		r.current.left--
		if r.current.left == 0 {
			r.current = fault{mode: "ok"}
		}
	}
	return f
}

func (r *receiver) set(f fault) {
	r.mu.Lock()
	r.current = f
	r.mu.Unlock()
}

// faults wraps the connect handler: a fault in force answers before connect sees the push.
func (r *receiver) faults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if *requireHeader != "" {
			name, value, _ := strings.Cut(*requireHeader, ":")
			if req.Header.Get(strings.TrimSpace(name)) != strings.TrimSpace(value) {
				r.write(event{Event: "fault", Fault: "unauthenticated", Status: 401})
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"code":"unauthenticated","message":"invalid credentials"}`)
				return
			}
		}
		f := r.take()
		switch f.mode {
		case "fail":
			r.write(event{Event: "fault", Fault: "fail", Status: f.status})
			http.Error(w, http.StatusText(f.status), f.status)
		case "hang":
			r.write(event{Event: "fault", Fault: "hang"})
			<-req.Context().Done()
		case "reset":
			r.write(event{Event: "fault", Fault: "reset"})
			hj, ok := w.(http.Hijacker)
			if !ok {
				panic(http.ErrAbortHandler)
			}
			conn, _, err := hj.Hijack()
			if err == nil {
				if tcp, ok := conn.(*net.TCPConn); ok {
					tcp.SetLinger(0) // RST, not FIN
				}
				conn.Close()
			}
		default:
			next.ServeHTTP(w, req)
		}
	})
}

// Push implements pushv1connect.PusherServiceHandler.
func (r *receiver) Push(ctx context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	request := r.requests.Add(1)
	inFlight := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	profiles := 0
	for _, series := range req.Msg.GetSeries() {
		profiles += len(series.GetSamples())
	}
	r.write(event{Event: "arrived", Request: request, InFlight: inFlight, Profiles: profiles})
	headers := map[string]string{}
	for _, name := range []string{"Authorization", "User-Agent", "Content-Type", "Connect-Protocol-Version"} {
		if v := req.Header().Get(name); v != "" {
			headers[name] = v
		}
	}
	// Decode and judge everything first: like Pyroscope, one bad profile refuses the push.
	var accepted []event
	var keptRaw [][]byte
	for _, series := range req.Msg.GetSeries() {
		labels := map[string]string{}
		names := []string{}
		for _, l := range series.GetLabels() {
			if _, dup := labels[l.GetName()]; dup {
				return nil, r.refuse(request, fmt.Sprintf("duplicate label name %q", l.GetName()))
			}
			labels[l.GetName()] = l.GetValue()
			names = append(names, l.GetName()+"=\""+l.GetValue()+"\"")
		}
		sort.Strings(names)
		shown := "{" + strings.Join(names, ", ") + "}"
		for _, sample := range series.GetSamples() {
			raw := sample.GetRawProfile()
			p, err := profile.ParseData(raw)
			if err != nil {
				return nil, r.refuse(request, fmt.Sprintf("failed to parse profile: %v", err))
			}
			if msg := outsideWindow(p.TimeNanos, shown); msg != "" {
				return nil, r.refuse(request, msg)
			}
			totals := map[string]int64{}
			types := []string{}
			for i, st := range p.SampleType {
				var sum int64
				for _, s := range p.Sample {
					sum += s.Value[i]
				}
				totals[st.Type] = sum
				types = append(types, st.Type+"/"+st.Unit)
			}
			digest := sha256.Sum256(raw)
			keptRaw = append(keptRaw, raw)
			accepted = append(accepted, event{
				Event:      "accepted",
				Tenant:     req.Header().Get("X-Scope-OrgID"),
				Headers:    headers,
				Labels:     labels,
				ID:         sample.GetID(),
				SHA256:     hex.EncodeToString(digest[:]),
				Bytes:      len(raw),
				TimeNanos:  p.TimeNanos,
				Totals:     totals,
				SampleType: types,
				Request:    request,
				InFlight:   inFlight,
			})
		}
	}
	if *delay > 0 {
		time.Sleep(*delay)
	}
	if err := r.store(accepted, keptRaw); err != nil {
		return nil, err
	}
	if *answerAfter > 0 {
		time.Sleep(*answerAfter)
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}

// store keeps each accepted profile and writes its event: from then on it counts as received.
func (r *receiver) store(accepted []event, keptRaw [][]byte) error {
	for i, e := range accepted {
		if *keep != "" {
			raw := keptRaw[i]
			tmp := filepath.Join(*keep, "."+e.SHA256)
			if err := os.WriteFile(tmp, raw, 0o644); err != nil {
				return connect.NewError(connect.CodeInternal, err)
			}
			if err := os.Rename(tmp, filepath.Join(*keep, e.SHA256)); err != nil {
				return connect.NewError(connect.CodeInternal, err)
			}
		}
		r.write(e)
	}
	return nil
}

func (r *receiver) refuse(request int64, msg string) error {
	r.write(event{Event: "refused", Status: 400, Message: msg, Request: request})
	return connect.NewError(connect.CodeInvalidArgument, errors.New(msg))
}

// outsideWindow words a refusal the way Pyroscope's validation does, or returns "".
func outsideWindow(timeNanos int64, labels string) string {
	now := time.Now()
	at := time.Unix(0, timeNanos).UTC()
	var start time.Time
	switch {
	case *windowStart != 0:
		start = time.UnixMilli(*windowStart)
	case *rejectOlder > 0:
		start = now.Add(-*rejectOlder)
	}
	if !start.IsZero() && at.Before(start) {
		return fmt.Sprintf("profile with labels '%s' is outside of ingestion window (profile timestamp: %s, the ingestion window starts at %s)",
			labels, at.Format("2006-01-02 15:04:05 -0700 MST"), start.UTC().Format("2006-01-02 15:04:05 -0700 MST"))
	}
	if *rejectNewer > 0 && at.After(now.Add(*rejectNewer)) {
		return fmt.Sprintf("profile with labels '%s' is outside of ingestion window (profile timestamp: %s, the ingestion window ends at %s)",
			labels, at.Format("2006-01-02 15:04:05 -0700 MST"), now.Add(*rejectNewer).UTC().Format("2006-01-02 15:04:05 -0700 MST"))
	}
	return ""
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pyroscope-receiver: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	flag.Parse()
	if *out == "" {
		fail("-out FILE is required")
	}
	log, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fail("%v", err)
	}
	first, err := parseFault(strings.Fields(*initialFault))
	if err != nil {
		fail("-fault: %v", err)
	}
	r := &receiver{current: first, log: log}

	mux := http.NewServeMux()
	path, handler := pushv1connect.NewPusherServiceHandler(r)
	mux.Handle(path, r.faults(handler))
	server := &http.Server{Handler: mux, ReadTimeout: *readBodyTimeout}

	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		fail("%v", err)
	}
	if *tlsDir != "" {
		config, err := throwAwayTLS(*tlsDir)
		if err != nil {
			fail("%v", err)
		}
		server.TLSConfig = config
	}
	fmt.Printf("listening on %s\n", listener.Addr())

	go commands(r)
	done := make(chan struct{})
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		// Graceful, as in a rolling restart: answer what is being answered, take nothing new.
		// A held (hanging) push is not waited for past the grace period.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		server.Shutdown(ctx)
		close(done)
	}()
	if *tlsDir != "" {
		err = server.ServeTLS(listener, "", "")
	} else {
		err = server.Serve(listener)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fail("%v", err)
	}
	<-done
}

func commands(r *receiver) {
	scanner := bufio.NewScanner(os.Stdin)
	n := 0
	for scanner.Scan() {
		words := strings.Fields(scanner.Text())
		if len(words) == 0 {
			continue
		}
		f, err := parseFault(words)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pyroscope-receiver:", err)
			continue
		}
		r.set(f)
		n++
		fmt.Printf("ack %d: %s\n", n, strings.Join(words, " "))
	}
}
