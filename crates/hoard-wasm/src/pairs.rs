//! Header maps as the ABI passes them: a count, the lengths of each name
//! and value, then each name and value followed by a zero byte (all
//! numbers little-endian `u32`).

/// The length of `pairs` in the ABI's form (what [`encode`] would make).
pub fn encoded_len<'a>(pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> usize {
    pairs.fold(4, |s, (k, v)| s + 8 + k.len() + v.len() + 2)
}

/// Serializes `pairs` in the ABI's form.
pub fn encode<'a>(pairs: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone) -> Vec<u8> {
    let (count, size) = pairs.clone().fold((0usize, 0usize), |(n, s), (k, v)| {
        (n + 1, s + k.len() + v.len() + 2)
    });
    let mut out = Vec::with_capacity(4 + count * 8 + size);
    out.extend_from_slice(&(count as u32).to_le_bytes());
    for (k, v) in pairs.clone() {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend_from_slice(k);
        out.push(0);
        out.extend_from_slice(v);
        out.push(0);
    }
    out
}

/// Parses the ABI's form; `None` when it is cut short or inconsistent.
pub fn decode(b: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let word = |at: usize| -> Option<usize> {
        let w = b.get(at..at + 4)?;
        Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as usize)
    };
    let count = word(0)?;
    // Every pair takes at least 10 bytes: refuse a count the buffer cannot hold.
    if count > b.len() / 10 + 1 {
        return None;
    }
    let mut at = 4 + count * 8;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let (kl, vl) = (word(4 + i * 8)?, word(8 + i * 8)?);
        let k = b.get(at..at + kl)?;
        at += kl + 1;
        let v = b.get(at..at + vl)?;
        at += vl + 1;
        if at > b.len() {
            return None;
        }
        out.push((k, v));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let pairs: Vec<(&[u8], &[u8])> = vec![(b":path", b"/a?b"), (b"x-one", b""), (b"k", b"v")];
        let b = encode(pairs.iter().copied());
        assert_eq!(b.len(), 4 + 3 * 8 + (5 + 4 + 2) + (5 + 2) + (1 + 1 + 2));
        assert_eq!(decode(&b).unwrap(), pairs);
    }

    #[test]
    fn short_or_lying_buffers_are_refused() {
        let b = encode([(&b"name"[..], &b"value"[..])].into_iter());
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_none(), "cut at {cut}");
        }
        let mut lying = b.clone();
        lying[0] = 200;
        assert!(decode(&lying).is_none());
    }
}
