package wire

// The reference's quirks beyond what its own tests check:
// what a client may rely on, kept here on purpose.

import (
	"bytes"
	"errors"
	"regexp"
	"testing"
	"time"
)

func part(sid, mid string, seq, total int, exp int64, chunk string) *Part {
	return &Part{SID: sid, MID: mid, Seq: seq, Total: total, Exp: exp, Chunk: []byte(chunk)}
}

func TestInconsistentPartCountDropsMessage(t *testing.T) {
	a := NewAssembler(AssemblerConfig{})
	now := time.Now()
	if _, err := a.Add("peer", part("aa", "bb", 1, 3, 0, "x"), now); err != nil {
		t.Fatal(err)
	}
	_, err := a.Add("peer", part("aa", "bb", 2, 2, 0, "y"), now)
	if err == nil || err.Error() != "wire: inconsistent part count for peer/aa/bb" {
		t.Fatalf("err %v", err)
	}
	if len(a.pending) != 0 || len(a.perPeer) != 0 || a.bytes != 0 {
		t.Fatalf("state kept: %d pending, %d peers, %d bytes", len(a.pending), len(a.perPeer), a.bytes)
	}
}

func TestTotalBytesSharedAcrossPeers(t *testing.T) {
	a := NewAssembler(AssemblerConfig{MaxTotalBytes: 6})
	now := time.Now()
	if _, err := a.Add("peer1", part("aa", "01", 1, 2, 0, "1234"), now); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Add("peer2", part("aa", "02", 1, 2, 0, "5678"), now); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge from the shared budget", err)
	}
	// Completing peer1's message frees its bytes.
	got, err := a.Add("peer1", part("aa", "01", 2, 2, 0, "56"), now)
	if err != nil || string(got) != "123456" || a.bytes != 0 {
		t.Fatalf("%q, %v, %d bytes held", got, err, a.bytes)
	}
}

func TestSinglePartSkipsBoundsAndCollection(t *testing.T) {
	a := NewAssembler(AssemblerConfig{MaxPendingPerPeer: 1, Timeout: time.Second})
	start := time.Now()
	if _, err := a.Add("peer", part("aa", "01", 1, 2, 0, "ab"), start); err != nil {
		t.Fatal(err)
	}
	one := part("aa", "02", 1, 1, 0, "whole")
	got, err := a.Add("peer", one, start.Add(time.Hour))
	if err != nil || &got[0] != &one.Chunk[0] {
		t.Fatalf("single part: %q, %v; want its own chunk back", got, err)
	}
	if len(a.pending) != 1 {
		t.Fatal("a single part collected the stale partial message")
	}
	// The next multi-part part does collect it, and so frees the peer's slot.
	if _, err := a.Add("peer", part("aa", "03", 1, 2, 0, "cd"), start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if len(a.pending) != 1 || a.pending["peer/aa/03"] == nil {
		t.Fatalf("pending %v", a.pending)
	}
}

func TestCollectionUsesFirstPartDeadline(t *testing.T) {
	a := NewAssembler(AssemblerConfig{})
	t0 := time.Unix(1_767_225_600, 0)
	// The first part to arrive is seq 2; its deadline is the message's.
	if _, err := a.Add("peer", part("aa", "01", 2, 2, t0.Unix()+10, "b"), t0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Add("peer", part("aa", "02", 1, 2, 0, "x"), t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(a.pending) != 2 {
		t.Fatal("collected during its deadline second")
	}
	if _, err := a.Add("peer", part("aa", "03", 1, 2, 0, "y"), t0.Add(11*time.Second)); err != nil {
		t.Fatal(err)
	}
	if a.pending["peer/aa/01"] != nil {
		t.Fatal("kept after its first part's deadline")
	}
	// A later part of it, with no deadline of its own, starts a fresh message.
	if got, err := a.Add("peer", part("aa", "01", 1, 2, 0, "a"), t0.Add(11*time.Second)); got != nil || err != nil {
		t.Fatalf("%q, %v", got, err)
	}
}

func TestDuplicateKeepsFirstCopy(t *testing.T) {
	a := NewAssembler(AssemblerConfig{})
	now := time.Now()
	for _, chunk := range []string{"first", "second"} {
		if got, err := a.Add("peer", part("aa", "01", 1, 2, 0, chunk), now); got != nil || err != nil {
			t.Fatalf("%q, %v", got, err)
		}
	}
	got, err := a.Add("peer", part("aa", "01", 2, 2, 0, "-tail"), now)
	if err != nil || string(got) != "first-tail" {
		t.Fatalf("%q, %v", got, err)
	}
}

func TestAnyChunkLengths(t *testing.T) {
	// The reference has no rule on part lengths: parts of any sizes join.
	a := NewAssembler(AssemblerConfig{})
	now := time.Now()
	a.Add("peer", part("aa", "01", 2, 3, 0, "defghij"), now)
	a.Add("peer", part("aa", "01", 3, 3, 0, "k"), now)
	got, err := a.Add("peer", part("aa", "01", 1, 3, 0, "abc"), now)
	if err != nil || string(got) != "abcdefghijk" {
		t.Fatalf("%q, %v", got, err)
	}
}

func TestExpiredIsStrictAndPositive(t *testing.T) {
	for _, c := range []struct {
		exp, now int64
		want     bool
	}{{100, 99, false}, {100, 100, false}, {100, 101, true}, {0, 1 << 40, false}, {-5, 1 << 40, false}} {
		if got := (&Part{Exp: c.exp}).Expired(time.Unix(c.now, 0)); got != c.want {
			t.Errorf("exp %d at %d: %v", c.exp, c.now, got)
		}
	}
}

func TestNewIDIsSixteenHex(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{16}$`)
	a, b := NewID(), NewID()
	if !re.MatchString(a) || !re.MatchString(b) || a == b {
		t.Fatalf("%q %q", a, b)
	}
}

func TestEncodeErrorTextsAndNoPMCap(t *testing.T) {
	if _, err := Encode("NOT HEX", []byte("x"), time.Time{}, 0); err == nil || err.Error() != `wire: invalid sid "NOT HEX"` {
		t.Errorf("err %v", err)
	}
	if _, err := Encode("", []byte("x"), time.Time{}, 0); err == nil || err.Error() != `wire: invalid sid ""` {
		t.Errorf("err %v", err)
	}
	// The sid is checked before the payload.
	if _, err := Encode("X", nil, time.Time{}, 0); err == nil || err.Error() != `wire: invalid sid "X"` {
		t.Errorf("err %v", err)
	}
	if _, err := Encode("aa", []byte{}, time.Time{}, 0); err == nil || err.Error() != "wire: empty payload" {
		t.Errorf("err %v", err)
	}
	// The reference does not bound a part's PM size: a 1.5 MiB chunk is one part.
	big := bytes.Repeat([]byte{0xa5}, 3<<19)
	pms, err := Encode("aa", big, time.Time{}, len(big))
	if err != nil || len(pms) != 1 || len(pms[0]) < 2<<20 {
		t.Fatalf("%d parts, %v", len(pms), err)
	}
	p, ok := Parse(pms[0])
	if !ok || !bytes.Equal(p.Chunk, big) {
		t.Fatal("the large part does not parse back")
	}
}

func TestConcurrentPeers(t *testing.T) {
	// Safe for concurrent use (run with -race): every peer's message completes.
	a := NewAssembler(AssemblerConfig{})
	now := time.Now()
	done := make(chan error)
	for g := 0; g < 8; g++ {
		go func(g int) {
			payload := bytes.Repeat([]byte{byte(g)}, 1000)
			pms, err := Encode("aa", payload, time.Time{}, 100)
			if err != nil {
				done <- err
				return
			}
			var got []byte
			for _, pm := range pms {
				p, _ := Parse(pm)
				if got, err = a.Add(string(rune('a'+g)), p, now); err != nil {
					done <- err
					return
				}
			}
			if !bytes.Equal(got, payload) {
				err = errors.New("payload differs")
			}
			done <- err
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
