//go:build regressed

package main

import "heapwatch.test/fixtures/internal/fixture"

// buildVersion is the version this build reports.
var buildVersion = "2.1.0"

// buildEventList retains every event it builds: the regression.
//
//go:noinline
func (m *routerDataModel) buildEventList(size int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	ev := make([]byte, size)
	fixture.Touch(ev, byte(m.seq))
	m.events = append(m.events, ev)
}

// replayPeerLog copies peer log entries and never drops them. It exists only
// in the regressed build.
//
//go:noinline
func (r *raftReadOnly) replayPeerLog(size int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	entry := make([]byte, size)
	fixture.Touch(entry, byte(len(r.peerLog)))
	r.peerLog = append(r.peerLog, entry)
}

func startRegressedWork() {
	go fixture.PaceConstant(int64(*replayRate), replaySize, raft.replayPeerLog)
}
