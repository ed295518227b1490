//! Table-driven Huffman coding for QPACK string literals (RFC 9204 §4.1.2,
//! using the code of RFC 7541 Appendix B).
//!
//! Patched in for hoard: `encode::HuffmanEncoder` and `decode::DecodeIter`
//! move one bit window at a time and allocate per literal (about 30,000
//! instructions for one response head of a cache hit). This module derives,
//! at compile time from the same `HPACK_STRING` table, each symbol's code as
//! one integer and the canonical code's per-length bounds, then encodes
//! through a 64-bit accumulator and decodes by comparing the next bits
//! against those bounds. The output is byte for byte what the bit-window
//! coder produces, and decoding gives the same octets; it also rejects
//! padding that the bit-window decoder lets through and RFC 7541 §5.2 makes
//! an error (8 bits or more, or not all ones). The tests below check both
//! against the original coder.

use bytes::BufMut;

use super::bitwin::BitWindow;
use super::decode::Error;
use super::encode::HPACK_STRING;

/// The end-of-string symbol: 30 ones (RFC 7541 Appendix B, symbol 256).
const EOS: (u32, u32) = (0x3fff_ffff, 30);
const MAX_LEN: usize = 30;

/// `(code, length in bits)` of every octet, the code right-aligned.
static CODES: [(u32, u32); 256] = CODES_CONST;

/// For each code length: the first code of that length in the canonical
/// order, how many codes have it, and where its symbols start in `SYMBOLS`.
static BOUNDS: Bounds = bounds();

struct Bounds {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    offset: [u16; MAX_LEN + 1],
    /// The 257 symbols sorted by (code length, symbol): canonical order.
    symbols: [u16; 257],
    min_len: u32,
}

const fn codes() -> [(u32, u32); 256] {
    let mut out = [(0u32, 0u32); 256];
    let mut sym = 0;
    while sym < 256 {
        let value = &HPACK_STRING[sym];
        let mut code = 0u32;
        let mut rest = value.bit_count;
        let mut i = 0;
        while i < value.buffer.len() {
            let n = if rest < 8 { rest } else { 8 };
            code = (code << n) | (value.buffer[i] as u32 & ((1u32 << n) - 1));
            rest -= n;
            i += 1;
        }
        out[sym] = (code, value.bit_count);
        sym += 1;
    }
    out
}

const fn code_of(sym: usize) -> (u32, u32) {
    if sym == 256 {
        EOS
    } else {
        CODES_CONST[sym]
    }
}

const CODES_CONST: [(u32, u32); 256] = codes();

const fn bounds() -> Bounds {
    let mut count = [0u32; MAX_LEN + 1];
    let mut sym = 0;
    while sym < 257 {
        count[code_of(sym).1 as usize] += 1;
        sym += 1;
    }
    let mut first = [0u32; MAX_LEN + 1];
    let mut offset = [0u16; MAX_LEN + 1];
    let mut code = 0u32;
    let mut at = 0u16;
    let mut min_len = 0u32;
    let mut len = 1;
    while len <= MAX_LEN {
        code = (code + count[len - 1]) << 1;
        first[len] = code;
        offset[len] = at;
        at += count[len] as u16;
        if min_len == 0 && count[len] > 0 {
            min_len = len as u32;
        }
        len += 1;
    }
    // Symbols in canonical order, and a compile-time check that the table
    // is the canonical code these bounds describe.
    let mut symbols = [0u16; 257];
    let mut next = offset;
    let mut sym = 0;
    while sym < 257 {
        let (c, l) = code_of(sym);
        let l = l as usize;
        let rank = next[l] - offset[l];
        assert!(c == first[l] + rank as u32, "the Huffman table is not canonical");
        symbols[next[l] as usize] = sym as u16;
        next[l] += 1;
        sym += 1;
    }
    Bounds {
        first,
        count,
        offset,
        symbols,
        min_len,
    }
}

/// Length in octets of `value` Huffman-coded, padding included.
pub fn encoded_len(value: &[u8]) -> usize {
    let bits: usize = value.iter().map(|&b| CODES[b as usize].1 as usize).sum();
    bits.div_ceil(8)
}

/// Appends `value` Huffman-coded, padded with the EOS prefix (ones).
///
/// Codes collect in `acc` (at most 31 bits waiting plus a 30-bit code) and
/// leave four octets at a time through a small stack buffer.
pub fn encode<B: BufMut>(value: &[u8], buf: &mut B) {
    let mut out = [0u8; 64];
    let mut filled = 0;
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in value {
        let (code, len) = CODES[b as usize];
        acc = (acc << len) | code as u64;
        bits += len;
        if bits >= 32 {
            bits -= 32;
            out[filled..filled + 4].copy_from_slice(&((acc >> bits) as u32).to_be_bytes());
            filled += 4;
            if filled == out.len() {
                buf.put_slice(&out);
                filled = 0;
            }
        }
    }
    while bits >= 8 {
        bits -= 8;
        out[filled] = (acc >> bits) as u8;
        filled += 1;
    }
    if bits > 0 {
        out[filled] = ((acc << (8 - bits)) as u8) | (0xff >> bits);
        filled += 1;
    }
    buf.put_slice(&out[..filled]);
}

/// Decodes a Huffman-coded string literal. Errors as the bit-window decoder
/// does: on a code not in the table, on the EOS symbol inside the string,
/// and on padding that is longer than 7 bits or not all ones
/// (RFC 7541 §5.2).
pub fn decode(input: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(input.len() * 8 / 5 + 1);
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    let mut at = 0;
    let b = &BOUNDS;
    loop {
        while bits < 56 && at < input.len() {
            acc = (acc << 8) | input[at] as u64;
            bits += 8;
            at += 1;
        }
        if bits == 0 {
            return Ok(out);
        }
        let window = acc & ((1u64 << bits) - 1);
        if at == input.len() && bits < 8 && window == (1u64 << bits) - 1 {
            return Ok(out);
        }
        let mut len = b.min_len;
        let sym = loop {
            if len > bits || len as usize > MAX_LEN {
                return Err(missing(at, bits));
            }
            let code = (window >> (bits - len)) as u32;
            let rank = code.wrapping_sub(b.first[len as usize]);
            if rank < b.count[len as usize] {
                break b.symbols[(b.offset[len as usize] as u32 + rank) as usize];
            }
            len += 1;
        };
        if sym == 256 {
            return Err(missing(at, bits));
        }
        out.push(sym as u8);
        bits -= len;
    }
}

fn missing(at: usize, bits: u32) -> Error {
    let consumed = at as u32 * 8 - bits;
    Error::MissingBits(BitWindow {
        byte: consumed / 8,
        bit: consumed % 8,
        count: 8,
    })
}

#[cfg(test)]
mod tests {
    use super::super::decode::HpackStringDecode;
    use super::super::encode::HpackStringEncode;
    use super::*;

    fn bit_window_encode(value: &[u8]) -> Vec<u8> {
        value.to_vec().hpack_encode().unwrap()
    }

    fn bit_window_decode(input: &[u8]) -> Result<Vec<u8>, ()> {
        input
            .to_vec()
            .hpack_decode()
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| ())
    }

    fn table_encode(value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(value, &mut out);
        assert_eq!(out.len(), encoded_len(value));
        out
    }

    #[test]
    fn every_octet_codes_as_before() {
        for b in 0..=255u8 {
            assert_eq!(table_encode(&[b]), bit_window_encode(&[b]), "octet {b}");
            assert_eq!(decode(&table_encode(&[b])).unwrap(), vec![b]);
        }
    }

    #[test]
    fn random_strings_code_as_before() {
        let mut rng = fastrand::Rng::with_seed(7);
        for round in 0..20_000 {
            let len = rng.usize(0..200);
            let value: Vec<u8> = if round % 2 == 0 {
                (0..len).map(|_| rng.u8(..)).collect()
            } else {
                (0..len).map(|_| rng.u8(0x20..0x7f)).collect()
            };
            let coded = table_encode(&value);
            assert_eq!(coded, bit_window_encode(&value));
            assert_eq!(decode(&coded).unwrap(), value);
            assert_eq!(bit_window_decode(&coded).unwrap(), value);
        }
    }

    #[test]
    fn random_input_is_accepted_and_rejected_as_before() {
        let mut rng = fastrand::Rng::with_seed(11);
        let (mut rejected, mut bad_padding) = (0, 0);
        for round in 0..50_000 {
            let len = rng.usize(0..24);
            let mut input: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            if round % 3 == 0 && !input.is_empty() {
                // mostly ones: long codes, EOS and padding cases
                for b in input.iter_mut() {
                    *b |= rng.u8(..) | rng.u8(..);
                }
            }
            let old = bit_window_decode(&input);
            let new = decode(&input).map_err(|_| ());
            match (&old, &new) {
                // The one difference: the bit-window decoder takes some
                // padding that RFC 7541 §5.2 makes an error (8 bits or more,
                // or not all ones). A valid coding is the only one of its
                // value, so such an input is not what its value codes to.
                (Ok(value), Err(())) => {
                    assert_ne!(bit_window_encode(value), input, "input {input:02x?}");
                    bad_padding += 1;
                }
                (_, Ok(value)) => {
                    assert_eq!(new, old, "input {input:02x?}");
                    assert_eq!(table_encode(value), input, "input {input:02x?}");
                }
                _ => {}
            }
            rejected += new.is_err() as u32;
        }
        assert!(rejected > 1_000, "too few invalid inputs exercised: {rejected}");
        assert!(bad_padding > 10, "too few bad paddings exercised: {bad_padding}");
    }

    #[test]
    fn padding_and_eos_rules() {
        // "a" is 00011 (5 bits) + 3 bits of padding
        assert_eq!(decode(&[0b0001_1111]).unwrap(), b"a");
        // padding not all ones
        assert!(decode(&[0b0001_1110]).is_err());
        // padding of 8 bits or more
        assert!(decode(&[0b0001_1111, 0xff]).is_err());
        // EOS (30 ones) inside the string
        assert!(decode(&[0xff, 0xff, 0xff, 0xff]).is_err());
        assert_eq!(decode(&[]).unwrap(), b"");
    }
}
