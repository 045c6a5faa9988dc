// Package raftlike stands in for a consensus module of the service's own
// organisation (heapwatch.test, as go.etcd.io/raft is etcd's): a module apart
// from the main one, whose node runs on a goroutine it starts itself and keeps
// every entry it is given, each a proto.Clone of the proposal. The leaf of
// every retained sample is google.golang.org/protobuf code; no frame of the
// main module is on the stack. The frame a maintainer acts on is
// heapwatch.test/raftlike.(*raft).appendEntry.
package raftlike

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// raft holds the log: appended to, never compacted (the leak).
type raft struct {
	log   []*wrapperspb.BytesValue
	bytes int
}

// appendEntry keeps a deep copy of the proposal, as raft's leader does.
//
//go:noinline
func (r *raft) appendEntry(e *wrapperspb.BytesValue) {
	c := proto.Clone(e).(*wrapperspb.BytesValue)
	r.log = append(r.log, c)
	r.bytes += len(c.Value)
}

//go:noinline
func (r *raft) stepLeader(e *wrapperspb.BytesValue) {
	r.appendEntry(e)
}

//go:noinline
func (r *raft) Step(e *wrapperspb.BytesValue) {
	r.stepLeader(e)
}

// Node is a running raft node: proposals go to its own goroutine.
type Node struct {
	propc chan *wrapperspb.BytesValue
}

// StartNode starts the node's goroutine.
func StartNode() *Node {
	n := &Node{propc: make(chan *wrapperspb.BytesValue, 64)}
	go n.run(&raft{})
	return n
}

// Propose hands a proposal to the node's goroutine, which owns it from then
// on (the caller must not change it).
func (n *Node) Propose(e *wrapperspb.BytesValue) {
	n.propc <- e
}

//go:noinline
func (n *Node) run(r *raft) {
	for e := range n.propc {
		r.Step(e)
	}
}
