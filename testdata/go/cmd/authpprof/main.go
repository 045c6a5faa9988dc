// Command authpprof serves net/http/pprof only to a client that proves who it
// is, as a pprof port behind a proxy would: Basic auth (-user, -password), a
// bearer token (-token: "Authorization: Bearer TOKEN"), a query token
// (-query-token: "?token=TOKEN" on every request), any of them at once. A
// request without the right credentials gets 401 and a body that says nothing
// of what was sent.
//
// With -fail-first N, the first N requests that do carry the right credentials
// are answered 503 with a body that echoes every credential the request held,
// as a careless proxy's debug page would: the worst an error page can do to a
// collector that prints the start of it.
//
// A steady leak in main.(*sessionCache).keep (-rate bytes per second, never
// freed) gives the heap profile a site that grows. It prints
// "listening on HOST:PORT" as its first stdout line (-listen sets the address).
package main

import (
	"crypto/subtle"
	"flag"
	"fmt"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/* on http.DefaultServeMux
	"os"
	"sync"
	"sync/atomic"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	user       = flag.String("user", "", "with -password: the Basic auth user name required")
	password   = flag.String("password", "", "with -user: the Basic auth password required (default: $AUTHPPROF_PASSWORD)")
	token      = flag.String("token", "", "if set, require the header \"Authorization: Bearer TOKEN\"")
	queryToken = flag.String("query-token", "", "if set, require the query parameter token=TOKEN")
	failFirst  = flag.Int("fail-first", 0, "answer this many authorised requests 503, echoing their credentials")
	rate       = fixture.BytesFlag("rate", 256<<10, "bytes per second kept for good by main.(*sessionCache).keep")
)

func same(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// authorised says whether r carries every credential the flags require.
func authorised(r *http.Request) bool {
	if *user != "" || *password != "" {
		u, p, ok := r.BasicAuth()
		if !ok || !same(u, *user) || !same(p, *password) {
			return false
		}
	}
	if *token != "" && !same(r.Header.Get("Authorization"), "Bearer "+*token) {
		return false
	}
	if *queryToken != "" && !same(r.URL.Query().Get("token"), *queryToken) {
		return false
	}
	return true
}

var failed atomic.Int64

func guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorised(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="pprof"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if failed.Add(1) <= int64(*failFirst) {
			u, p, _ := r.BasicAuth()
			http.Error(w, fmt.Sprintf(
				"warming up; your request: user %s password %s authorization %q token %s query %s",
				u, p, r.Header.Get("Authorization"), r.URL.Query().Get("token"), r.URL.RawQuery,
			), http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type sessionCache struct {
	mu   sync.Mutex
	kept [][]byte
}

//go:noinline
func (c *sessionCache) keep(size int) {
	b := make([]byte, size)
	fixture.Touch(b, byte(len(c.kept)))
	c.mu.Lock()
	c.kept = append(c.kept, b)
	c.mu.Unlock()
}

func main() {
	fixture.Parse()
	if *password == "" {
		// Out of the command line, for a test that searches a run holding that line.
		*password = os.Getenv("AUTHPPROF_PASSWORD")
	}
	fixture.ServeHandler(guard(http.DefaultServeMux))
	var cache sessionCache
	go fixture.PaceConstant(int64(*rate), 16<<10, cache.keep)
	fixture.Forever()
}
