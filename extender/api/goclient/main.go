// Command goclient drives the extender's verbs the way kube-scheduler does: Go's
// net/http with keep-alive connections, one verb after another per pod.
//
//	goclient -url http://127.0.0.1:PORT -body args.json -paths /filter,/prioritize \
//	         -seconds 5 -clients 1
//
// Each client repeats the paths in turn (one round = one sample) until the time is
// up, then the samples (seconds per round) and the request count are printed as
// JSON on stdout. Any status but 200 is an error and stops the run.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

type result struct {
	Samples  []float64 `json:"samples"`
	Requests int       `json:"requests"`
	Elapsed  float64   `json:"elapsed"`
	// This client's own garbage collections during the run: each one takes CPU (and
	// a short stop) from the two cores the server also runs on.
	GCs uint32 `json:"gcs"`
}

func main() {
	url := flag.String("url", "", "extender base URL")
	bodyFile := flag.String("body", "", "request body (ExtenderArgs JSON)")
	paths := flag.String("paths", "/filter,/prioritize", "verbs sent in turn")
	seconds := flag.Float64("seconds", 5, "run length")
	clients := flag.Int("clients", 1, "concurrent keep-alive connections")
	flag.Parse()
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// As kube-scheduler's extender client: Go's default transport, which asks for
	// gzip and inflates the answer transparently.
	transport := &http.Transport{MaxIdleConnsPerHost: *clients}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	verbs := strings.Split(*paths, ",")
	post := func(path string) error {
		r, err := client.Post(*url+path, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer r.Body.Close()
		data, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		if r.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d %.200s", path, r.StatusCode, data)
		}
		return nil
	}
	var (
		mu       sync.Mutex
		out      result
		failures []error
		wg       sync.WaitGroup
	)
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	gcs := mem.NumGC
	start := time.Now()
	stop := start.Add(time.Duration(*seconds * float64(time.Second)))
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			n := 0
			for time.Now().Before(stop) {
				t0 := time.Now()
				for _, path := range verbs {
					if err := post(path); err != nil {
						mu.Lock()
						failures = append(failures, err)
						mu.Unlock()
						return
					}
					n++
				}
				mine = append(mine, time.Since(t0).Seconds())
			}
			mu.Lock()
			out.Samples = append(out.Samples, mine...)
			out.Requests += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	out.Elapsed = time.Since(start).Seconds()
	runtime.ReadMemStats(&mem)
	out.GCs = mem.NumGC - gcs
	if len(failures) > 0 {
		fmt.Fprintln(os.Stderr, failures[0])
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
