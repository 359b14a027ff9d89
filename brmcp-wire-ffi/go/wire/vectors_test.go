package wire

// The Go reference's verdicts (brmcp-wire/tests/vectors/go) through this
// package: every parse case and every encode case, byte for byte.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var vectorDir = filepath.Join("..", "..", "..", "brmcp-wire", "tests", "vectors", "go")

// readLines decodes every line of a vector file into a new T.
func readLines[T any](t *testing.T, name string) []T {
	t.Helper()
	f, err := os.Open(filepath.Join(vectorDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type parseCase struct {
	Case string `json:"case"`
	Body string `json:"body"`
	Go   struct {
		OK       bool   `json:"ok"`
		SID      string `json:"sid"`
		MID      string `json:"mid"`
		Seq      int    `json:"seq"`
		Total    int    `json:"total"`
		Exp      int64  `json:"exp"`
		ChunkB64 string `json:"chunk_b64"`
	} `json:"go"`
}

func TestParseVectors(t *testing.T) {
	cases := readLines[parseCase](t, "wire-parse-go.jsonl")
	if len(cases) != 276 {
		t.Fatalf("%d cases, want 276", len(cases))
	}
	accepted := 0
	for _, c := range cases {
		p, ok := Parse(c.Body)
		if ok != c.Go.OK {
			t.Errorf("%s: ok=%v, go ok=%v", c.Case, ok, c.Go.OK)
			continue
		}
		if !ok {
			continue
		}
		accepted++
		want, err := base64.StdEncoding.DecodeString(c.Go.ChunkB64)
		if err != nil {
			t.Fatal(err)
		}
		g := c.Go
		if p.SID != g.SID || p.MID != g.MID || p.Seq != g.Seq || p.Total != g.Total || p.Exp != g.Exp {
			t.Errorf("%s: header %+v, go %+v", c.Case, p, g)
		}
		if !bytes.Equal(p.Chunk, want) {
			t.Errorf("%s: chunk differs", c.Case)
		}
	}
	if accepted == 0 || accepted == len(cases) {
		t.Fatalf("%d of %d accepted", accepted, len(cases))
	}
}

type encodeCase struct {
	Case       string `json:"case"`
	SID        string `json:"sid"`
	MID        string `json:"mid"`
	Exp        int64  `json:"exp"`
	Chunk      int    `json:"chunk"`
	PayloadGen *struct {
		Seed uint64 `json:"seed"`
		Len  int    `json:"len"`
	} `json:"payload_gen"`
	PayloadB64    *string  `json:"payload_b64"`
	PayloadLen    int      `json:"payload_len"`
	PayloadSHA256 string   `json:"payload_sha256"`
	OK            bool     `json:"ok"`
	Error         string   `json:"error"`
	Parts         []string `json:"parts"`
}

// genPayload is the vectors' generator: xorshift64 (13, 7, 17), words
// little-endian.
func genPayload(seed uint64, n int) []byte {
	out := make([]byte, 0, n+8)
	for x := seed; len(out) < n; {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for k := 0; k < 8; k++ {
			out = append(out, byte(x>>(8*k)))
		}
	}
	return out[:n]
}

func (c *encodeCase) payload(t *testing.T) []byte {
	var p []byte
	if c.PayloadB64 != nil {
		var err error
		if p, err = base64.StdEncoding.DecodeString(*c.PayloadB64); err != nil {
			t.Fatal(err)
		}
	} else {
		p = genPayload(c.PayloadGen.Seed, c.PayloadGen.Len)
	}
	sum := sha256.Sum256(p)
	if len(p) != c.PayloadLen || hex.EncodeToString(sum[:]) != c.PayloadSHA256 {
		t.Fatalf("%s: payload does not match its digest", c.Case)
	}
	return p
}

func TestEncodeVectors(t *testing.T) {
	cases := readLines[encodeCase](t, "wire-encode-go.jsonl")
	if len(cases) != 37 {
		t.Fatalf("%d cases, want 37", len(cases))
	}
	defer func(orig func() string) { newMID = orig }(newMID)
	for _, c := range cases {
		mid := c.MID
		newMID = func() string { return mid }
		var exp time.Time
		if c.Exp != 0 {
			exp = time.Unix(c.Exp, 0)
		}
		got, err := Encode(c.SID, c.payload(t), exp, c.Chunk)
		if !c.OK {
			if err == nil || err.Error() != c.Error {
				t.Errorf("%s: err %v, go %q", c.Case, err, c.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.Case, err)
			continue
		}
		if len(got) != len(c.Parts) {
			t.Errorf("%s: %d parts, go %d", c.Case, len(got), len(c.Parts))
			continue
		}
		for i := range got {
			if got[i] != c.Parts[i] {
				t.Errorf("%s: part %d differs", c.Case, i+1)
			}
		}
	}
}
