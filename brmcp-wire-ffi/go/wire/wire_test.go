package wire

// The behaviour the Go reference's own wire tests assert, one test each, under
// the same names.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func parsed(t *testing.T, pm string) *Part {
	t.Helper()
	p, ok := Parse(pm)
	if !ok {
		t.Fatalf("Parse refused %q", pm)
	}
	return p
}

func encoded(t *testing.T, sid string, payload []byte, exp time.Time, chunk int) []string {
	t.Helper()
	pms, err := Encode(sid, payload, exp, chunk)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return pms
}

func TestSinglePartRoundTrip(t *testing.T) {
	payload := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
	pms := encoded(t, "0123456789abcdef", payload, time.Time{}, 0)
	if len(pms) != 1 {
		t.Fatalf("%d parts, want 1", len(pms))
	}
	p := parsed(t, pms[0])
	if p.SID != "0123456789abcdef" || p.Seq != 1 || p.Total != 1 || p.Exp != 0 {
		t.Fatalf("part %+v", p)
	}
	got, err := NewAssembler(AssemblerConfig{}).Add("peer", p, time.Now())
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("Add = %q, %v", got, err)
	}
}

func TestChunkedRoundTripOutOfOrder(t *testing.T) {
	payload := make([]byte, 16<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	pms := encoded(t, "beef", payload, time.Time{}, 4096)
	if len(pms) != 4 {
		t.Fatalf("%d parts, want 4", len(pms))
	}
	a := NewAssembler(AssemblerConfig{})
	now := time.Now()
	var got []byte
	for n, i := range []int{2, 0, 3, 1} {
		res, err := a.Add("peer", parsed(t, pms[i]), now)
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if n < 3 && res != nil {
			t.Fatalf("complete after %d deliveries", n+1)
		}
		got = res
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("reassembled payload differs")
	}
}

func TestParseRejectsNonEnvelope(t *testing.T) {
	for _, text := range []string{
		"hi, how are you?",
		"> **alice:** a quoted line",
		"--embed[type=text/plain,data=QUJD]--",
		"--mcp[v=1,sid=xyz,mid=bb,seq=1/1,exp=0]--QUJD",         // sid not hex
		"--mcp[v=2,sid=aa,mid=bb,seq=1/1,exp=0]--QUJD",          // another version
		"--mcp[v=1,sid=aa,mid=bb,seq=3/2,exp=0]--QUJD",          // seq over total
		"--mcp[v=1,sid=aa,mid=bb,seq=1/999,exp=0]--QUJD",        // total over MaxParts
		"--mcp[v=1,sid=aa,mid=bb,seq=1/1,exp=0]--QU*D",          // not base64
		"--mcp[v=1,sid=aa,mid=bb,seq=1/1,exp=0]--QUJD--mcp[]--", // a second tag
		"--mcp[v=1,sid=aa,seq=1/1,exp=0]--QUJD",                 // no mid
	} {
		if p, ok := Parse(text); ok {
			t.Errorf("Parse accepted %q as %+v", text, p)
		}
	}
}

func TestExpiredPartDropped(t *testing.T) {
	pms := encoded(t, "aa", []byte("late"), time.Now().Add(-time.Minute), 0)
	_, err := NewAssembler(AssemblerConfig{}).Add("peer", parsed(t, pms[0]), time.Now())
	if !errors.Is(err, ErrExpired) {
		t.Fatalf("err %v, want ErrExpired", err)
	}
}

func TestPendingPerPeerBound(t *testing.T) {
	a := NewAssembler(AssemblerConfig{MaxPendingPerPeer: 2})
	now := time.Now()
	first := func(sid string) *Part {
		return parsed(t, encoded(t, sid, []byte("abcdefgh"), time.Time{}, 4)[0])
	}
	for _, sid := range []string{"a0", "a1"} {
		if _, err := a.Add("peer1", first(sid), now); err != nil {
			t.Fatal(err)
		}
	}
	third := first("a2")
	if _, err := a.Add("peer1", third, now); !errors.Is(err, ErrOverflow) {
		t.Fatalf("err %v, want ErrOverflow", err)
	}
	if _, err := a.Add("peer2", third, now); err != nil {
		t.Fatalf("another peer refused: %v", err)
	}
}

func TestMessageBytesBound(t *testing.T) {
	a := NewAssembler(AssemblerConfig{MaxMessageBytes: 6})
	now := time.Now()
	pms := encoded(t, "aa", []byte("12345678"), time.Time{}, 4)
	if _, err := a.Add("peer", parsed(t, pms[0]), now); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Add("peer", parsed(t, pms[1]), now); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("second chunk: err %v, want ErrTooLarge", err)
	}
	single := encoded(t, "bb", []byte("12345678"), time.Time{}, 0)
	if _, err := a.Add("peer", parsed(t, single[0]), now); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("single part: err %v, want ErrTooLarge", err)
	}
}

func TestTimeoutGC(t *testing.T) {
	a := NewAssembler(AssemblerConfig{Timeout: time.Second})
	pms := encoded(t, "aa", []byte("12345678"), time.Time{}, 4)
	start := time.Now()
	if _, err := a.Add("peer", parsed(t, pms[0]), start); err != nil {
		t.Fatal(err)
	}
	res, err := a.Add("peer", parsed(t, pms[1]), start.Add(2*time.Second))
	if err != nil || res != nil {
		t.Fatalf("late part: %q, %v; want a fresh partial message", res, err)
	}
	if len(a.pending) != 1 {
		t.Fatalf("%d pending messages, want only the fresh one", len(a.pending))
	}
}

func TestDuplicatePartIgnored(t *testing.T) {
	pms := encoded(t, "aa", []byte("12345678"), time.Time{}, 4)
	a := NewAssembler(AssemblerConfig{})
	now := time.Now()
	for i := 0; i < 2; i++ {
		if res, err := a.Add("peer", parsed(t, pms[0]), now); err != nil || res != nil {
			t.Fatalf("copy %d: %q, %v", i+1, res, err)
		}
	}
	res, err := a.Add("peer", parsed(t, pms[1]), now)
	if err != nil || string(res) != "12345678" {
		t.Fatalf("completion: %q, %v", res, err)
	}
}

func TestEncodeBounds(t *testing.T) {
	if _, err := Encode("NOT-HEX", []byte("x"), time.Time{}, 0); err == nil {
		t.Error("invalid sid accepted")
	}
	if _, err := Encode("aa", nil, time.Time{}, 0); err == nil {
		t.Error("empty payload accepted")
	}
	tooMany := make([]byte, (MaxParts+1)*16)
	if _, err := Encode("aa", tooMany, time.Time{}, 16); !errors.Is(err, ErrTooLarge) {
		t.Errorf("65 parts: err %v, want ErrTooLarge", err)
	}
}

func TestEncodeSetsDeadline(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	pms := encoded(t, "aa", []byte("x"), exp, 0)
	p := parsed(t, pms[0])
	if p.Exp != exp.Unix() {
		t.Fatalf("exp %d, want %d", p.Exp, exp.Unix())
	}
	if !p.Expired(exp.Add(time.Second)) || p.Expired(exp.Add(-time.Second)) {
		t.Fatal("Expired misjudges the deadline")
	}
	if !strings.Contains(pms[0], fmt.Sprintf(",exp=%d]", exp.Unix())) {
		t.Fatalf("no deadline in %s", pms[0])
	}
}
