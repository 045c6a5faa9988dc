module example.org/ledger

go 1.26

require example.com/wal v0.0.0

replace example.com/wal => ../wal
