// A message framed into PMs and read back, through the Go package over brmcp-wire.
package main

import (
	"fmt"
	"log"
	"time"

	"github.com/brmcp/brmcp/brmcp-wire-ffi/go/wire" // was github.com/karamble/brmcp/wire
)

func main() {
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)

	// Sending: one PM each, 16 bytes of the message per part to show several.
	pms, err := wire.Encode("7f3a", msg, time.Now().Add(10*time.Minute), 16)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(pms), "PMs")

	// Receiving: PMs arrive in any order, with ordinary chat among them.
	a := wire.NewAssembler(wire.AssemblerConfig{})
	peer := "the sender's user id"
	for _, text := range []string{pms[2], "hello, are you there?", pms[0], pms[1]} {
		p, ok := wire.Parse(text)
		if !ok {
			fmt.Println("chat, not ours:", text)
			continue
		}
		got, err := a.Add(peer, p, time.Now())
		if err != nil {
			log.Fatal(err)
		}
		if got == nil {
			fmt.Println("part", p.Seq, "of", p.Total, "stored, message incomplete")
		} else {
			fmt.Println("message:", string(got))
		}
	}
}
