package wire

import (
	"fmt"
	"sync"
	"time"
)

// The reference's Assembler semantics are its contract, and they differ from
// brmcp-wire's reassembler (which adds a part-length rule, per-peer byte
// budgets and eager expiry, and takes undecoded parts): this file keeps them
// exactly, over parts whose chunks the library already decoded.
//
//   - A part past its own deadline is ErrExpired, whatever else holds.
//   - A single-part message is returned at once: only its size is bounded.
//   - Stale partial messages (first part's deadline passed, or older than
//     Timeout) are dropped when a multi-part part arrives, and only then.
//   - A duplicate seq is ignored (the first copy stays); a part count that
//     differs from the message's, and any bound, drops the message.
//   - MaxTotalBytes bounds the chunks of all peers together.

// AssemblerConfig bounds in-flight reassembly state. The zero value selects
// the defaults; so does any field <= 0.
type AssemblerConfig struct {
	// MaxPendingPerPeer caps concurrently reassembling messages per peer
	// (default 8).
	MaxPendingPerPeer int
	// MaxMessageBytes caps one reassembled message (default 16 MiB).
	MaxMessageBytes int64
	// MaxTotalBytes caps all buffered chunks across peers (default 64 MiB).
	MaxTotalBytes int64
	// Timeout evicts partial messages that stopped arriving (default 10 min).
	Timeout time.Duration
}

// The defaults, those of brmcp-wire's Limits as well.
const (
	defaultMaxPendingPerPeer = 8
	defaultMaxMessageBytes   = 16 << 20
	defaultMaxTotalBytes     = 64 << 20
	defaultTimeout           = 10 * time.Minute
)

func (c AssemblerConfig) orDefaults() AssemblerConfig {
	if c.MaxPendingPerPeer <= 0 {
		c.MaxPendingPerPeer = defaultMaxPendingPerPeer
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = defaultMaxMessageBytes
	}
	if c.MaxTotalBytes <= 0 {
		c.MaxTotalBytes = defaultMaxTotalBytes
	}
	if c.Timeout <= 0 {
		c.Timeout = defaultTimeout
	}
	return c
}

// partial is one message still missing parts.
type partial struct {
	peer      string
	total     int
	chunks    map[int][]byte // by seq
	bytes     int64
	exp       int64 // of the first part that arrived
	firstSeen time.Time
}

// stale reports whether the message is to be dropped at now.
func (m *partial) stale(now time.Time, timeout time.Duration) bool {
	first := Part{Exp: m.exp}
	return first.Expired(now) || now.Sub(m.firstSeen) > timeout
}

// Assembler reassembles chunked messages with hard bounds, so a hostile peer
// cannot grow its buffers without limit. Safe for concurrent use.
type Assembler struct {
	mu      sync.Mutex
	cfg     AssemblerConfig
	pending map[string]*partial // by peer/sid/mid
	perPeer map[string]int      // partial messages per peer
	bytes   int64               // chunk bytes held, all peers
}

// NewAssembler returns an empty assembler with cfg's bounds.
func NewAssembler(cfg AssemblerConfig) *Assembler {
	return &Assembler{
		cfg:     cfg.orDefaults(),
		pending: make(map[string]*partial),
		perPeer: make(map[string]int),
	}
}

// Add ingests one part from peer. It returns the full payload once every
// chunk has arrived, nil while the message is still partial (or the part is
// a duplicate), and an error when the part is expired or a bound would be
// exceeded (the message's state is then dropped).
func (a *Assembler) Add(peer string, p *Part, now time.Time) ([]byte, error) {
	if p.Expired(now) {
		return nil, ErrExpired
	}
	if p.Total == 1 {
		if int64(len(p.Chunk)) > a.cfg.MaxMessageBytes {
			return nil, ErrTooLarge
		}
		return p.Chunk, nil
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	for key, m := range a.pending {
		if m.stale(now, a.cfg.Timeout) {
			a.drop(key, m)
		}
	}

	key := peer + "/" + p.SID + "/" + p.MID
	m, ok := a.pending[key]
	if !ok {
		if a.perPeer[peer] >= a.cfg.MaxPendingPerPeer {
			return nil, ErrOverflow
		}
		m = &partial{
			peer:      peer,
			total:     p.Total,
			chunks:    make(map[int][]byte),
			exp:       p.Exp,
			firstSeen: now,
		}
		a.pending[key] = m
		a.perPeer[peer]++
	}
	if p.Total != m.total {
		a.drop(key, m)
		return nil, fmt.Errorf("wire: inconsistent part count for %s", key)
	}
	if _, dup := m.chunks[p.Seq]; dup {
		return nil, nil
	}
	n := int64(len(p.Chunk))
	if m.bytes+n > a.cfg.MaxMessageBytes || a.bytes+n > a.cfg.MaxTotalBytes {
		a.drop(key, m)
		return nil, ErrTooLarge
	}
	m.chunks[p.Seq] = p.Chunk
	m.bytes += n
	a.bytes += n
	if len(m.chunks) < m.total {
		return nil, nil
	}
	payload := make([]byte, 0, m.bytes)
	for seq := 1; seq <= m.total; seq++ {
		payload = append(payload, m.chunks[seq]...)
	}
	a.drop(key, m)
	return payload, nil
}

// drop forgets message key and releases what it held.
func (a *Assembler) drop(key string, m *partial) {
	delete(a.pending, key)
	a.bytes -= m.bytes
	if a.perPeer[m.peer]--; a.perPeer[m.peer] <= 0 {
		delete(a.perPeer, m.peer)
	}
}
