module heapwatch.test/fixtures

go 1.26

require (
	example.com/wal v0.0.0
	example.org/ledger v0.0.0
	github.com/openziti/agent v1.0.30
	google.golang.org/protobuf v1.36.11
	heapwatch.test/raftlike v0.0.0
)

// The stand-in for a WAL library of another module (cmd/replay).
replace example.com/wal => ./wal

// A module of the user's own in another organisation than the main module's
// (cmd/ledgergrow): named as theirs only by --own.
replace example.org/ledger => ./ledger

// A module of the main module's own organisation (cmd/raftgrow): its frames
// are the project's code, though not the main module's.
replace heapwatch.test/raftlike => ./raftlike

require (
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/mgutz/ansi v0.0.0-20200706080929-d51e80ef957d // indirect
	github.com/michaelquigley/pfxlog v0.6.10 // indirect
	github.com/mitchellh/go-ps v1.0.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	golang.org/x/crypto v0.38.0 // indirect
	golang.org/x/sys v0.33.0 // indirect
	golang.org/x/term v0.32.0 // indirect
)
