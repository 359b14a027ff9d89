//! BLAKE-256 (the SHA-3 finalist, 14 rounds, no salt), the hash brclient computes
//! post ids with (`rpc.PostMetadata.Hash`, decred's `blake256`). No crate of it was
//! at hand; it is small, and its tests carry the BLAKE paper's vectors.

/// The initial chain value (SHA-256's).
const IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// The constants (the first digits of pi).
const C: [u32; 16] = [
    0x243f_6a88,
    0x85a3_08d3,
    0x1319_8a2e,
    0x0370_7344,
    0xa409_3822,
    0x299f_31d0,
    0x082e_fa98,
    0xec4e_6c89,
    0x4528_21e6,
    0x38d0_1377,
    0xbe54_66cf,
    0x34e9_0c6c,
    0xc0ac_29b7,
    0xc97c_50dd,
    0x3f84_d5b5,
    0xb547_0917,
];

/// The message permutations; round `r` uses row `r % 10`.
const SIGMA: [[usize; 16]; 10] = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
    [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
    [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
    [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
    [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
    [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
    [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
    [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
];

/// BLAKE-256's rounds.
const ROUNDS: usize = 14;

/// The column and diagonal steps: state indices `(a, b, c, d)` of `G0`..`G7`.
const STEPS: [[usize; 4]; 8] = [
    [0, 4, 8, 12],
    [1, 5, 9, 13],
    [2, 6, 10, 14],
    [3, 7, 11, 15],
    [0, 5, 10, 15],
    [1, 6, 11, 12],
    [2, 7, 8, 13],
    [3, 4, 9, 14],
];

/// Compresses one 64-byte block into `h`; `t` is the message bits counted up to the
/// end of this block (0 for a block of padding only).
fn compress(h: &mut [u32; 8], block: &[u8], t: u64) {
    let mut m = [0u32; 16];
    for (w, chunk) in m.iter_mut().zip(block.chunks_exact(4)) {
        *w = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    #[expect(clippy::cast_possible_truncation, reason = "the counter's two halves")]
    let (t0, t1) = (t as u32, (t >> 32) as u32);
    let mut v = [0u32; 16];
    v[..8].copy_from_slice(h);
    v[8..12].copy_from_slice(&C[..4]);
    v[12] = t0 ^ C[4];
    v[13] = t0 ^ C[5];
    v[14] = t1 ^ C[6];
    v[15] = t1 ^ C[7];
    for r in 0..ROUNDS {
        let s = &SIGMA[r % 10];
        for (i, &[a, b, c, d]) in STEPS.iter().enumerate() {
            let (x, y) = (s[2 * i], s[2 * i + 1]);
            v[a] = v[a].wrapping_add(v[b]).wrapping_add(m[x] ^ C[y]);
            v[d] = (v[d] ^ v[a]).rotate_right(16);
            v[c] = v[c].wrapping_add(v[d]);
            v[b] = (v[b] ^ v[c]).rotate_right(12);
            v[a] = v[a].wrapping_add(v[b]).wrapping_add(m[y] ^ C[x]);
            v[d] = (v[d] ^ v[a]).rotate_right(8);
            v[c] = v[c].wrapping_add(v[d]);
            v[b] = (v[b] ^ v[c]).rotate_right(7);
        }
    }
    for i in 0..8 {
        h[i] ^= v[i] ^ v[i + 8];
    }
}

/// BLAKE-256 of `data`.
pub(crate) fn blake256(data: &[u8]) -> [u8; 32] {
    let bits = (data.len() as u64).wrapping_mul(8);
    // The message, a 1 bit, zeros to 447 mod 512 bits, a 1 bit, the length in bits.
    let mut padded = data.to_vec();
    padded.push(0x80);
    while padded.len() % 64 != 56 {
        padded.push(0);
    }
    if let Some(last) = padded.last_mut() {
        *last |= 0x01;
    }
    padded.extend_from_slice(&bits.to_be_bytes());
    let mut h = IV;
    for (k, block) in padded.chunks_exact(64).enumerate() {
        let start = (k as u64) * 512;
        // A block holding message bits counts them up to its end; one of padding only
        // counts none.
        let t = if start < bits {
            bits.min(start + 512)
        } else {
            0
        };
        compress(&mut h, block, t);
    }
    let mut out = [0u8; 32];
    for (chunk, word) in out.chunks_exact_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::blake256;

    fn hex(data: &[u8]) -> String {
        hex::encode(blake256(data))
    }

    /// The BLAKE paper's two examples: one 0x00 byte (one block) and 72 of them (two
    /// blocks, the second with message bits and padding).
    #[test]
    fn the_papers_vectors() {
        assert_eq!(
            hex(&[0]),
            "0ce8d4ef4dd7cd8d62dfded9d4edb0a774ae6a41929a74da23109e8f11139c87"
        );
        assert_eq!(
            hex(&[0; 72]),
            "d419bad32d504fb7d44d460c42c5593fe544fa4c135dec31e21bd9abdcc22d41"
        );
    }

    /// Vectors decred's `blake256` is tested with: the empty message, short ones, one
    /// of 57 bytes (its padding spills into a block of padding only) and one of 88.
    #[test]
    fn decreds_vectors() {
        for (want, text) in [
            (
                "716f6e863f744b9ac22c97ec7b76ea5f5908bc5b2f67c61510bfc4751384ea7a",
                "",
            ),
            (
                "43234ff894a9c0590d0246cfc574eb781a80958b01d7a2fa1ac73c673ba5e311",
                "a",
            ),
            (
                "1833a9fa7cf4086bd5fda73da32e5a1d75b4c3f89d5c436369f9d78bb2da5c28",
                "abc",
            ),
            (
                "4d48d137bc9cf6d21415b805bf33f59320337d85c673998260e03a02a0d760cd",
                "He who has a shady past knows that nice guys finish last.",
            ),
            (
                "8ff699b5ac7687c82600e89d0ff6cfa87e7179759184386971feb76fbae9975f",
                "There is no reason for any individual to have a computer in their home. -Ken Olsen, 1977",
            ),
        ] {
            assert_eq!(hex(text.as_bytes()), want, "{text:?}");
        }
    }

    /// The padding's edges, from another implementation of BLAKE-256: 55 bytes (the
    /// two 1 bits share a byte), 56 (a block of padding only follows), 64 (a full
    /// block) and 119.
    #[test]
    fn padding_edges() {
        for (n, want) in [
            (
                55,
                "6e8d7898571228c1106fcec9ef9c5db9df8a3a2dcd2655a848af596d181bbae4",
            ),
            (
                56,
                "ea7a29472a26148914abb8033869be9bdea294fdd2b73ed7a02a7692940f5b9e",
            ),
            (
                64,
                "84d7f3bbf2cfc3ee940ddb6d25045c6d3f756c4b2077a8128e171d5d165be170",
            ),
            (
                119,
                "4e23ccf09b752550dcc4584764826a67de9f61347763603745bc94e4e9ffc0bf",
            ),
        ] {
            assert_eq!(hex(&vec![b'a'; n]), want, "{n} bytes");
        }
    }
}
