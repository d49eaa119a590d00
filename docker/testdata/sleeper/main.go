// Command sleeper stands in for the agent in the docker provider's tests: it
// prints its arguments; if its config file (the argument after --config)
// has a line "dial: HOST:PORT", it connects there and says hello, as an
// agent would call its controller; then it sleeps until SIGTERM or SIGINT.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	fmt.Println(os.Args)
	for i, a := range os.Args {
		if a == "--config" && i+1 < len(os.Args) {
			dial(os.Args[i+1])
		}
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, os.Interrupt)
	<-c
}

func dial(config string) {
	data, err := os.ReadFile(config)
	if err != nil {
		fmt.Println("read config:", err)
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		addr, ok := strings.CutPrefix(line, "dial: ")
		if !ok {
			continue
		}
		conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			fmt.Println("dial:", err)
			return
		}
		host, _ := os.Hostname()
		fmt.Fprintf(conn, "hello from %s\n", host)
		conn.Close()
	}
}
