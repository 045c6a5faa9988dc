module heapwatch.test/vm

go 1.26
