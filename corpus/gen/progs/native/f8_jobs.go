// f8b- tuning cases: a Go step fetching data over the network (net/http, net) from a server
// that stalls, resets or is not there; the error is net.OpError / url.Error text
// (net/net.go, net/http/client.go). Usage: f8go MODE PORT
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	mode, port := os.Args[1], os.Args[2]
	url := fmt.Sprintf("http://127.0.0.1:%s/ckpt/step-12000/model-00002-of-00004.safetensors", port)
	switch mode {
	case "client_timeout": // the server accepts and never answers
		fmt.Println("GET", url, "(timeout 3s)")
		c := &http.Client{Timeout: 3 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			log.Fatalf("download shard: %v", err)
		}
		defer resp.Body.Close()
	case "reset": // the server reads the request and resets the connection
		fmt.Println("GET", url)
		resp, err := http.Get(url)
		if err != nil {
			panic(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil {
			panic(err)
		}
		fmt.Println(n, "bytes")
	case "refused": // nobody listens on the port
		fmt.Println("connecting to the metrics sink on port", port)
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 2*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		conn.Close()
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
}
