module example.com/wal

go 1.26
