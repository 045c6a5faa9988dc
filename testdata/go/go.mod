module heapwatch.test/fixtures

go 1.26
