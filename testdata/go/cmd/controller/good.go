//go:build !regressed

package main

import "heapwatch.test/fixtures/internal/fixture"

// buildVersion is the version this build reports.
var buildVersion = "2.0.2"

// buildEventList keeps a bounded ring of the newest events: it allocates as
// much as the regressed build, but in-use stays flat at ~2 MiB.
//
//go:noinline
func (m *routerDataModel) buildEventList(size int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	ev := make([]byte, size)
	fixture.Touch(ev, byte(m.seq))
	if len(m.events) < keptEvents {
		m.events = append(m.events, ev)
		return
	}
	m.events[m.seq%keptEvents] = ev
}

// startRegressedWork has nothing to start in the good build.
func startRegressedWork() {}
