// Package wire frames opaque payloads (JSON-RPC messages in practice) into
// Bison Relay private messages, one part per PM:
//
//	--mcp[v=1,sid=<hex>,mid=<hex>,seq=<n>/<total>,exp=<unix>]--<base64 chunk>
//
// It has exactly the API and behaviour of the wire package of the Go
// reference implementation (github.com/karamble/brmcp/wire), so a client
// switches by changing its import path. Parsing, body decoding, encoding and
// ids are done by brmcp-wire, the Rust codec, through its C ABI
// (brmcp_wire.h); this package links its static library with cgo. The
// Assembler keeps the reference's bounds and bookkeeping (see assembler.go).
//
// Build the library first, from the repository root:
//
//	cargo build --release -p brmcp-wire-ffi
//
// The cgo flags below find it in target/release of this checkout; with
// another target directory, set CGO_LDFLAGS=-L<target>/release.
package wire

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../../target/release -l:libbrmcp_wire_ffi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
#include "brmcp_wire.h"
*/
import "C"

import (
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"time"
	"unsafe"
)

// Version is the envelope version emitted by Encode and accepted by Parse.
const Version = 1

// DefaultChunkSize is the raw payload bytes per part before base64 when the
// caller does not choose one.
const DefaultChunkSize = 200 * 1024

// MaxParts bounds one message's part count.
const MaxParts = 64

// The constants above are the library's: these fail to compile (a negative
// constant converted to uint) as soon as the two disagree.
const (
	_ = uint(Version-C.BRMCP_WIRE_VERSION) + uint(C.BRMCP_WIRE_VERSION-Version)
	_ = uint(DefaultChunkSize-C.BRMCP_WIRE_DEFAULT_CHUNK_LEN) + uint(C.BRMCP_WIRE_DEFAULT_CHUNK_LEN-DefaultChunkSize)
	_ = uint(MaxParts-C.BRMCP_WIRE_MAX_PARTS) + uint(C.BRMCP_WIRE_MAX_PARTS-MaxParts)
)

var (
	// ErrExpired: the part's deadline has passed.
	ErrExpired = errors.New("message deadline passed")
	// ErrTooLarge: a message over its size bound, or one needing more than
	// MaxParts parts.
	ErrTooLarge = errors.New("message exceeds size bounds")
	// ErrOverflow: the peer already has its maximum of partial messages.
	ErrOverflow = errors.New("reassembly buffer full")
)

// Part is one parsed envelope.
type Part struct {
	SID   string
	MID   string
	Seq   int
	Total int
	// Exp is the sender-set deadline in unix seconds; 0 means none.
	Exp   int64
	Chunk []byte
}

// Expired reports whether the part's deadline has passed at now: Exp > 0 and
// now strictly after that second.
func (p *Part) Expired(now time.Time) bool {
	return bool(C.brmcp_wire_is_expired(C.int64_t(p.Exp), C.int64_t(now.Unix())))
}

// NewID returns a fresh random 16-hex identifier for sessions and messages.
func NewID() string {
	var entropy [8]byte
	if _, err := rand.Read(entropy[:]); err != nil {
		panic(fmt.Sprintf("wire: rand failed: %v", err))
	}
	var id [17]C.char
	if st := C.brmcp_wire_id_from_entropy((*C.uint8_t)(&entropy[0]), &id[0]); st != C.BRMCP_WIRE_STATUS_OK {
		panic(fmt.Sprintf("wire: id: %s", status(st)))
	}
	return C.GoStringN(&id[0], 16)
}

// newMID gives each encoded message its id; the vector tests fix it.
var newMID = NewID

// Encode frames payload into one PM body per part under sid. A zero exp
// emits no deadline (exp=0). chunkSize <= 0 selects DefaultChunkSize. The sid
// is checked first, then the payload, then the part count.
func Encode(sid string, payload []byte, exp time.Time, chunkSize int) ([]string, error) {
	if C.brmcp_wire_check_id(stringData(sid), C.size_t(len(sid))) != C.BRMCP_WIRE_STATUS_OK {
		return nil, fmt.Errorf("wire: invalid sid %q", sid)
	}
	if chunkSize <= 0 {
		chunkSize = DefaultChunkSize
	}
	if len(payload) == 0 {
		return nil, errors.New("wire: empty payload")
	}
	// The reference's part count and chunk bounds, not the library's plan: the
	// reference does not cap the PM size a large chunkSize makes.
	total := (len(payload) + chunkSize - 1) / chunkSize
	if total > MaxParts {
		return nil, ErrTooLarge
	}
	var expUnix int64
	if !exp.IsZero() {
		expUnix = exp.Unix()
	}
	mid := newMID()
	out := make([]string, 0, total)
	for i := 0; i < total; i++ {
		start := i * chunkSize
		end := start + chunkSize
		if end > len(payload) {
			end = len(payload)
		}
		pm, err := encodePart(sid, mid, i+1, total, expUnix, payload[start:end])
		if err != nil {
			return nil, err
		}
		out = append(out, pm)
	}
	return out, nil
}

// encodePart encodes one part through the library.
func encodePart(sid, mid string, seq, total int, exp int64, chunk []byte) (string, error) {
	var h C.brmcp_wire_header
	st := C.brmcp_wire_header_init(&h, stringData(sid), C.size_t(len(sid)), stringData(mid), C.size_t(len(mid)),
		C.uint16_t(seq), C.uint16_t(total), C.int64_t(exp))
	runtime.KeepAlive(sid)
	runtime.KeepAlive(mid)
	if st != C.BRMCP_WIRE_STATUS_OK {
		return "", fmt.Errorf("wire: encode: %s", status(st))
	}
	var need, n C.size_t
	if st := C.brmcp_wire_encoded_len(&h, C.size_t(len(chunk)), &need); st != C.BRMCP_WIRE_STATUS_OK {
		return "", fmt.Errorf("wire: encode: %s", status(st))
	}
	buf := make([]byte, int(need))
	st = C.brmcp_wire_encode_part(&h, bytesData(chunk), C.size_t(len(chunk)), bytesData(buf), need, &n)
	if st != C.BRMCP_WIRE_STATUS_OK {
		return "", fmt.Errorf("wire: encode: %s", status(st))
	}
	return string(buf[:n]), nil
}

// Parse decodes one PM body. ok is false for anything that is not a
// well-formed part of a supported version, so plain chat on the same thread
// is ignored by callers.
func Parse(text string) (p *Part, ok bool) {
	data := stringData(text)
	defer runtime.KeepAlive(text)
	var part C.brmcp_wire_part
	if C.brmcp_wire_parse(data, C.size_t(len(text)), C.BRMCP_WIRE_MODE_COMPATIBLE, &part) != C.BRMCP_WIRE_STATUS_OK {
		return nil, false
	}
	chunk := make([]byte, int(part.decoded_len_max))
	body := (*C.uint8_t)(unsafe.Pointer(uintptr(unsafe.Pointer(data)) + uintptr(part.body_offset)))
	var n C.size_t
	if C.brmcp_wire_decode_body(body, part.body_len, C.BRMCP_WIRE_MODE_COMPATIBLE,
		bytesData(chunk), C.size_t(len(chunk)), &n) != C.BRMCP_WIRE_STATUS_OK {
		return nil, false
	}
	h := &part.header
	return &Part{
		SID:   C.GoStringN(&h.sid[0], C.int(h.sid_len)),
		MID:   C.GoStringN(&h.mid[0], C.int(h.mid_len)),
		Seq:   int(h.seq),
		Total: int(h.total),
		Exp:   int64(h.exp),
		Chunk: chunk[:int(n)],
	}, true
}

// status is the library's message for a status code.
func status(st C.brmcp_wire_status) string {
	return C.GoString(C.brmcp_wire_strerror(C.int32_t(st)))
}

// stringData points at a string's bytes without copying them (nil when
// empty). The library only reads them, during the call; callers keep the
// string alive across it.
func stringData(s string) *C.uint8_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer((*reflect.StringHeader)(unsafe.Pointer(&s)).Data))
}

// bytesData points at a slice's bytes (nil when empty).
func bytesData(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0]))
}
