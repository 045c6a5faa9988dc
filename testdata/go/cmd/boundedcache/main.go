// Command boundedcache has an LRU cache that fills to its bound (32 MiB by
// default) within ~3 s and then evicts: in-use memory grows in
// main.(*lruCache).put, then plateaus. main.serveGet churns short-lived
// response copies.
package main

import (
	"math/rand/v2"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	capacity = fixture.BytesFlag("capacity", 32<<20, "bound of the cache in bytes")
	rate     = fixture.BytesFlag("rate", 12<<20, "bytes per second put into the cache")
	churn    = fixture.BytesFlag("churn", 8<<20, "bytes per second of short-lived allocation in main.serveGet")
	valSize  = fixture.BytesFlag("value", 16<<10, "size of one cached value")
)

type entry struct {
	key        uint64
	value      []byte
	prev, next *entry
}

// lruCache is a byte-bounded LRU: a map for lookup, and an intrusive doubly
// linked list with the most recently used entry at the front.
type lruCache struct {
	limit int
	used  int
	items map[uint64]*entry
	head  entry // sentinel: head.next is the newest, head.prev the oldest
}

func newLRUCache(limit int) *lruCache {
	c := &lruCache{limit: limit, items: make(map[uint64]*entry)}
	c.head.next, c.head.prev = &c.head, &c.head
	return c
}

func (c *lruCache) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (c *lruCache) pushFront(e *entry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

//go:noinline
func (c *lruCache) put(key uint64, size int) {
	if old, ok := c.items[key]; ok {
		c.unlink(old)
		c.used -= len(old.value)
		delete(c.items, key)
	}
	e := &entry{key: key, value: make([]byte, size)}
	fixture.Touch(e.value, byte(key))
	c.items[key] = e
	c.pushFront(e)
	c.used += size
	for c.used > c.limit && c.head.prev != &c.head {
		oldest := c.head.prev
		c.unlink(oldest)
		delete(c.items, oldest.key)
		c.used -= len(oldest.value)
	}
}

func (c *lruCache) get(key uint64) []byte {
	e, ok := c.items[key]
	if !ok {
		return nil
	}
	c.unlink(e)
	c.pushFront(e)
	return e.value
}

var sink = make([][]byte, 64)

//go:noinline
func serveGet(c *lruCache, i int, key uint64, size int) {
	resp := make([]byte, size)
	if v := c.get(key); v != nil {
		copy(resp, v)
	}
	resp[0] = byte(i)
	sink[i%len(sink)] = resp
}

func main() {
	fixture.Parse()
	fixture.Serve()
	limit := int(*capacity)
	size := max(int(*valSize), 1)
	c := newLRUCache(limit)
	// Eight times as many keys as fit: nearly every put is a new key, so the
	// cache fills at about -rate and then evicts.
	keys := uint64(8*limit/size + 1)
	r := rand.New(rand.NewPCG(1, 2))
	// The cache is not synchronized: one goroutine does both puts and gets,
	// on schedule since start.
	start := time.Now()
	puts, gets := 0, 0
	t := time.NewTicker(fixture.Tick)
	for range t.C {
		el := time.Since(start).Seconds()
		for ; float64(puts)*float64(size) < el*float64(*rate); puts++ {
			c.put(r.Uint64N(keys), size)
		}
		for ; float64(gets)*float64(size) < el*float64(*churn); gets++ {
			serveGet(c, gets, r.Uint64N(keys), size)
		}
	}
}
