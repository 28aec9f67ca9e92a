// Go jobs for the f7r- tuning cases: a data-prep tool that dies of an uncaught panic or a
// runtime throw in several ways (rules go_* in classify/rules.yaml).
// Usage: f7go MODE [ARG]
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
)

type shard struct {
	Path string `json:"path"`
	Rows int    `json:"rows"`
}

// window cuts a shard's rows into fixed windows; an off-by-one reads past the last one
func window(rows []int, size int) [][]int {
	var out [][]int
	for i := 0; i <= len(rows)/size; i++ {
		out = append(out, rows[i*size:(i+1)*size])
	}
	return out
}

func main() {
	mode := os.Args[1]
	fmt.Printf("prep: mode %s\n", mode)
	switch mode {
	case "window": // slice bounds out of range: a runtime panic
		rows := make([]int, 1000)
		for _, w := range window(rows, 128) {
			fmt.Printf("window of %d rows\n", len(w))
		}
	case "manifest": // a nil map in a struct the config never filled: a nil-map write panic
		var byName map[string]shard
		for _, n := range []string{"train-000", "train-001"} {
			fmt.Printf("registering %s\n", n)
			byName[n] = shard{Path: "/data/" + n, Rows: 512}
		}
	case "config": // panic(err) on a config file that is not there: open's ENOENT words
		f, err := os.Open(os.Args[2])
		if err != nil {
			panic(err)
		}
		defer f.Close()
		var s []shard
		if err := json.NewDecoder(f).Decode(&s); err != nil {
			panic(err)
		}
	case "dedup": // goroutines writing one map without a lock: the runtime's throw
		seen := map[string]int{}
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < 2_000_000; i++ {
					seen[fmt.Sprint(i%5000)] = w
				}
			}(w)
		}
		wg.Wait()
	case "grow": // an index that keeps every line in memory: the heap outgrows the address space
		var keep [][]byte
		for i := 0; ; i++ {
			keep = append(keep, []byte(strings.Repeat("x", 64<<20)))
			if i%4 == 0 {
				fmt.Printf("indexed %d blocks\n", len(keep))
			}
		}
	case "ok": // a handled error: logged, the run goes on and ends well
		if _, err := os.Open("/nonexistent/optional-overrides.json"); err != nil {
			fmt.Printf("no overrides (%v), using defaults\n", err)
		}
		fmt.Println("prep done: 12 shards written")
	}
}
