module heapwatch.test/procheap

go 1.22
