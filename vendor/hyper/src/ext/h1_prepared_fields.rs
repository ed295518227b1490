use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};

/// Header fields of an HTTP/1 server response, encoded once and written as
/// they are on every response that carries them (a response extension).
///
/// A server that sends the same fields many times (a cache answering hits
/// of one stored response) encodes them once with [`PreparedFields::encode`]
/// and puts a clone (a reference count) in each response's extensions.
/// hyper writes the lines right after the status line, then the
/// response's own `HeaderMap` as usual, which holds only what differs
/// between responses.
///
/// Fields that differ between responses but repeat across many of them
/// (a hit's `Age` and cache status) may be encoded the same way and
/// joined on with [`PreparedFields::followed_by`]: a response whose fields
/// are all prepared needs no `HeaderMap` entry at all.
///
/// The lines are lower-case and written whatever the connection's case
/// settings, on any response that carries them (HEAD, 204 and 304
/// included: the caller decides). HTTP/2 ignores this extension.
#[derive(Clone, Debug)]
pub struct PreparedFields {
    lines: Bytes,
    /// Lines written after `lines` (see `followed_by`); empty when none.
    more: Bytes,
    has_date: bool,
}

impl PreparedFields {
    /// Encodes `fields` as `name: value\r\n` lines.
    ///
    /// `None` when a field is one hyper must see to frame the message
    /// (`Content-Length`, `Transfer-Encoding`, `Connection`, `Trailer`):
    /// those belong in the response's `HeaderMap`. A `Date` among the
    /// fields keeps hyper from adding its own (the response's map must
    /// then have none). `capacity` is the lines' length when the caller
    /// knows it (each field's name and value, plus 4): one allocation,
    /// no spare room.
    pub fn encode<'a, I>(capacity: usize, fields: I) -> Option<PreparedFields>
    where
        I: IntoIterator<Item = (&'a HeaderName, &'a HeaderValue)>,
    {
        let mut lines = BytesMut::with_capacity(capacity);
        let mut has_date = false;
        for (name, value) in fields {
            if name == header::CONTENT_LENGTH
                || name == header::TRANSFER_ENCODING
                || name == header::CONNECTION
                || name == header::TRAILER
            {
                return None;
            }
            has_date |= name == header::DATE;
            lines.reserve(name.as_str().len() + value.len() + 4);
            lines.put_slice(name.as_str().as_bytes());
            lines.put_slice(b": ");
            lines.put_slice(value.as_bytes());
            lines.put_slice(b"\r\n");
        }
        Some(PreparedFields {
            lines: lines.freeze(),
            more: Bytes::new(),
            has_date,
        })
    }

    /// These lines, then `more`'s: two reference counts, no copy. Lines
    /// joined before, to these or to `more`, are not kept (join encoded
    /// fields, not joins).
    pub fn followed_by(&self, more: &PreparedFields) -> PreparedFields {
        PreparedFields {
            lines: self.lines.clone(),
            more: more.lines.clone(),
            has_date: self.has_date || more.has_date,
        }
    }

    /// The encoded lines (without those joined by `followed_by`).
    pub fn as_bytes(&self) -> &[u8] {
        &self.lines
    }

    /// Writes every line: these, then the joined ones.
    pub(crate) fn write_to(&self, dst: &mut Vec<u8>) {
        dst.extend_from_slice(&self.lines);
        dst.extend_from_slice(&self.more);
    }

    pub(crate) fn has_date(&self) -> bool {
        self.has_date
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_date() {
        let mut h = http::HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        h.append(header::VARY, HeaderValue::from_static("a"));
        h.append(header::VARY, HeaderValue::from_static("b"));
        let p = PreparedFields::encode(0, &h).unwrap();
        assert_eq!(p.as_bytes(), b"content-type: text/plain\r\nvary: a\r\nvary: b\r\n");
        assert!(!p.has_date());
        h.insert(header::DATE, HeaderValue::from_static("x"));
        assert!(PreparedFields::encode(0, &h).unwrap().has_date());
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("1"));
        assert!(PreparedFields::encode(0, &h).is_none());
    }

    #[test]
    fn joined_lines() {
        let mut a = http::HeaderMap::new();
        a.insert(header::ETAG, HeaderValue::from_static("\"e\""));
        let mut b = http::HeaderMap::new();
        b.insert(header::AGE, HeaderValue::from_static("3"));
        b.insert(header::DATE, HeaderValue::from_static("x"));
        let a = PreparedFields::encode(0, &a).unwrap();
        let b = PreparedFields::encode(0, &b).unwrap();
        let j = a.followed_by(&b);
        let mut out = Vec::new();
        j.write_to(&mut out);
        assert_eq!(out, b"etag: \"e\"\r\nage: 3\r\ndate: x\r\n");
        assert!(j.has_date() && !a.has_date());
        // A join of a join keeps only the second's own lines.
        let mut out = Vec::new();
        b.followed_by(&j).write_to(&mut out);
        assert_eq!(out, b"age: 3\r\ndate: x\r\netag: \"e\"\r\n");
    }
}
