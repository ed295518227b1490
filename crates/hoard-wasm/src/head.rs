//! The request and response heads a filter reads and edits, with the
//! pseudo-header fields Envoy gives filters (`:method`, `:path`,
//! `:authority`, `:scheme` on requests, `:status` on responses).

use std::borrow::Cow;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

/// A request's head as filters see it (moved into the VM for a callback
/// and back out, never copied).
#[derive(Debug, Default)]
pub struct RequestHead {
    /// `:method`.
    pub method: Method,
    /// `:path`: the path and query.
    pub path: String,
    /// `:authority`.
    pub authority: String,
    /// `:scheme`.
    pub scheme: &'static str,
    /// The header fields.
    pub headers: HeaderMap,
}

/// A response's head as filters see it.
#[derive(Debug, Default)]
pub struct ResponseHead {
    /// `:status`.
    pub status: StatusCode,
    /// The header fields.
    pub headers: HeaderMap,
}

/// An edit refused: a bad name or value, or a pseudo-header that cannot
/// take it.
#[derive(Debug)]
pub struct BadEdit;

/// What the header-map calls need of a head.
pub(crate) trait Head {
    fn pseudo(&self, name: &[u8]) -> Option<&[u8]>;
    fn set_pseudo(&mut self, name: &[u8], value: &[u8]) -> Result<(), BadEdit>;
    fn pseudo_names(&self) -> &'static [&'static str];
    fn headers(&self) -> &HeaderMap;
    fn headers_mut(&mut self) -> &mut HeaderMap;

    /// The value of `name`; several lines are joined with `,`.
    fn get(&self, name: &[u8]) -> Option<Cow<'_, [u8]>> {
        if name.first() == Some(&b':') {
            return self.pseudo(name).map(Cow::Borrowed);
        }
        let name = HeaderName::from_bytes(name).ok()?;
        let mut all = self.headers().get_all(&name).iter();
        let first = all.next()?;
        match all.next() {
            None => Some(Cow::Borrowed(first.as_bytes())),
            Some(second) => {
                let mut v = first.as_bytes().to_vec();
                for more in std::iter::once(second).chain(all) {
                    v.push(b',');
                    v.extend_from_slice(more.as_bytes());
                }
                Some(Cow::Owned(v))
            }
        }
    }

    /// Every field, the pseudo-headers first.
    fn pairs(&self) -> Vec<(&[u8], &[u8])> {
        let mut out = Vec::with_capacity(self.headers().len() + 4);
        for p in self.pseudo_names() {
            if let Some(v) = self.pseudo(p.as_bytes()) {
                out.push((p.as_bytes(), v));
            }
        }
        for (k, v) in self.headers() {
            out.push((k.as_str().as_bytes(), v.as_bytes()));
        }
        out
    }

    /// `name: value` in place of any field of that name.
    fn replace(&mut self, name: &[u8], value: &[u8]) -> Result<(), BadEdit> {
        if name.first() == Some(&b':') {
            return self.set_pseudo(name, value);
        }
        let (n, v) = field(name, value)?;
        self.headers_mut().insert(n, v);
        Ok(())
    }

    /// `name: value` added after any field of that name.
    fn add(&mut self, name: &[u8], value: &[u8]) -> Result<(), BadEdit> {
        if name.first() == Some(&b':') {
            return self.set_pseudo(name, value);
        }
        let (n, v) = field(name, value)?;
        self.headers_mut().append(n, v);
        Ok(())
    }

    /// Every field named `name` removed (pseudo-headers stay).
    fn remove(&mut self, name: &[u8]) -> Result<(), BadEdit> {
        if name.first() == Some(&b':') {
            return Err(BadEdit);
        }
        let n = HeaderName::from_bytes(name).map_err(|_| BadEdit)?;
        self.headers_mut().remove(n);
        Ok(())
    }

    /// The whole map replaced by `pairs` (pseudo-headers set, others
    /// replacing every field).
    fn set_pairs(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<(), BadEdit> {
        let mut next = HeaderMap::with_capacity(pairs.len());
        for (k, v) in pairs {
            if k.first() == Some(&b':') {
                self.set_pseudo(k, v)?;
            } else {
                let (n, v) = field(k, v)?;
                next.append(n, v);
            }
        }
        *self.headers_mut() = next;
        Ok(())
    }
}

fn field(name: &[u8], value: &[u8]) -> Result<(HeaderName, HeaderValue), BadEdit> {
    let n = HeaderName::from_bytes(name).map_err(|_| BadEdit)?;
    let v = HeaderValue::from_bytes(value).map_err(|_| BadEdit)?;
    Ok((n, v))
}

impl Head for RequestHead {
    fn pseudo(&self, name: &[u8]) -> Option<&[u8]> {
        let v: &[u8] = match name {
            b":method" => self.method.as_str().as_bytes(),
            b":path" => self.path.as_bytes(),
            b":authority" => self.authority.as_bytes(),
            b":scheme" => self.scheme.as_bytes(),
            _ => return None,
        };
        Some(v)
    }

    fn set_pseudo(&mut self, name: &[u8], value: &[u8]) -> Result<(), BadEdit> {
        let text = std::str::from_utf8(value).map_err(|_| BadEdit)?;
        match name {
            b":method" => self.method = Method::from_bytes(value).map_err(|_| BadEdit)?,
            b":path"
                if text.starts_with('/') && http::uri::PathAndQuery::try_from(text).is_ok() =>
            {
                self.path = text.to_owned();
            }
            b":authority" if http::uri::Authority::try_from(text).is_ok() => {
                self.authority = text.to_owned();
            }
            _ => return Err(BadEdit),
        }
        Ok(())
    }

    fn pseudo_names(&self) -> &'static [&'static str] {
        &[":method", ":path", ":authority", ":scheme"]
    }

    fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.headers
    }
}

impl Head for ResponseHead {
    fn pseudo(&self, name: &[u8]) -> Option<&[u8]> {
        match name {
            b":status" => Some(self.status.as_str().as_bytes()),
            _ => None,
        }
    }

    fn set_pseudo(&mut self, name: &[u8], value: &[u8]) -> Result<(), BadEdit> {
        match name {
            b":status" => {
                self.status = StatusCode::from_bytes(value).map_err(|_| BadEdit)?;
                Ok(())
            }
            _ => Err(BadEdit),
        }
    }

    fn pseudo_names(&self) -> &'static [&'static str] {
        &[":status"]
    }

    fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> RequestHead {
        let mut h = HeaderMap::new();
        h.append("x-a", HeaderValue::from_static("1"));
        h.append("x-a", HeaderValue::from_static("2"));
        RequestHead {
            method: Method::GET,
            path: "/p?q=1".into(),
            authority: "example.com".into(),
            scheme: "https",
            headers: h,
        }
    }

    #[test]
    fn pseudo_headers_come_first_and_lines_are_joined() {
        let r = req();
        let pairs = r.pairs();
        let names: Vec<&[u8]> = pairs.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            [
                &b":method"[..],
                b":path",
                b":authority",
                b":scheme",
                b"x-a",
                b"x-a"
            ]
        );
        assert_eq!(r.get(b"x-a").unwrap().as_ref(), b"1,2");
        assert_eq!(r.get(b":path").unwrap().as_ref(), b"/p?q=1");
        assert!(r.get(b"x-missing").is_none());
    }

    #[test]
    fn edits_apply_and_bad_ones_are_refused() {
        let mut r = req();
        r.replace(b":path", b"/other").unwrap();
        r.add(b"x-b", b"v").unwrap();
        r.remove(b"x-a").unwrap();
        assert_eq!(r.path, "/other");
        assert_eq!(r.headers.get("x-b").unwrap(), "v");
        assert!(r.headers.get("x-a").is_none());
        assert!(r.replace(b":path", b"no-slash").is_err());
        assert!(r.replace(b":scheme", b"ftp").is_err());
        assert!(r.add(b"bad name", b"v").is_err());
        assert!(r.add(b"x-c", b"line\nbreak").is_err());
        assert!(r.remove(b":path").is_err());
        let mut s = ResponseHead::default();
        s.replace(b":status", b"404").unwrap();
        assert_eq!(s.status, StatusCode::NOT_FOUND);
        assert!(s.replace(b":status", b"99x").is_err());
    }
}
