// Command agentcall sends one request to a gops-style agent with the real
// github.com/openziti/agent client and copies the reply to stdout. It exists
// to record real replies (testdata/agent/record.sh); it refuses the ops that
// block an agent (0x06 CPU profile, 0x08 trace) and those that change it.
//
//	agentcall unix:/tmp/gops-agent.123.sock memstats
package main

import (
	"fmt"
	"os"

	"github.com/openziti/agent"
)

var ops = map[string]byte{
	"stack":    agent.StackTrace,
	"memstats": agent.MemStats,
	"version":  agent.Version,
	"heap":     agent.HeapProfile,
	"stats":    agent.Stats,
	"appinfo":  agent.AppInfo,
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: agentcall unix:/path.sock|tcp:HOST:PORT stack|memstats|version|heap|stats|appinfo")
		os.Exit(2)
	}
	op, ok := ops[os.Args[2]]
	if !ok {
		fmt.Fprintf(os.Stderr, "agentcall: unknown op %q\n", os.Args[2])
		os.Exit(2)
	}
	if err := agent.MakeRequest(os.Args[1], op, nil, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "agentcall: %v\n", err)
		os.Exit(1)
	}
}
