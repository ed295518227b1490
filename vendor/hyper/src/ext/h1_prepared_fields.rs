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
/// The lines are lower-case and written whatever the connection's case
/// settings, on any response that carries them (HEAD, 204 and 304
/// included: the caller decides). HTTP/2 ignores this extension.
#[derive(Clone, Debug)]
pub struct PreparedFields {
    lines: Bytes,
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
            has_date,
        })
    }

    /// The encoded lines.
    pub fn as_bytes(&self) -> &[u8] {
        &self.lines
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
}
