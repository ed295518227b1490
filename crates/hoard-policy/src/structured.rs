//! A strict parser for Structured Field Dictionaries (RFC 8941 §4.2.2), as
//! `CDN-Cache-Control` requires (RFC 9213 §2.1): a field that does not parse
//! is ignored as a whole.

/// A bare item of a dictionary member (RFC 8941 §3.3). Inner lists and
/// parameters are parsed and dropped: no cache directive uses them.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `?1` / `?0`, or a member without a value (true).
    Boolean(bool),
    /// An integer.
    Integer(i64),
    /// A decimal.
    Decimal(f64),
    /// A quoted string.
    String(String),
    /// A token.
    Token(String),
    /// A byte sequence (kept encoded).
    Bytes(String),
    /// An inner list (contents dropped).
    InnerList,
}

/// Parses a dictionary; `None` when the text is not a valid dictionary.
pub fn parse_dictionary(input: &str) -> Option<Vec<(String, Item)>> {
    let mut p = Parser {
        s: input.as_bytes(),
        i: 0,
    };
    p.skip_sp();
    let mut out = Vec::new();
    if p.i == p.s.len() {
        return Some(out);
    }
    loop {
        let key = p.key()?;
        let item = if p.peek() == Some(b'=') {
            p.i += 1;
            if p.peek() == Some(b'(') {
                p.inner_list()?
            } else {
                p.bare_item()?
            }
        } else {
            Item::Boolean(true)
        };
        p.params()?;
        // Later duplicates override earlier ones (RFC 8941 §4.2.2).
        out.retain(|(k, _)| k != &key);
        out.push((key, item));
        p.skip_ows();
        if p.i == p.s.len() {
            return Some(out);
        }
        if p.peek() != Some(b',') {
            return None;
        }
        p.i += 1;
        p.skip_ows();
        if p.i == p.s.len() {
            return None; // trailing comma
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_sp(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn key(&mut self) -> Option<String> {
        let start = self.i;
        match self.peek()? {
            b'a'..=b'z' | b'*' => self.i += 1,
            _ => return None,
        }
        while matches!(
            self.peek(),
            Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')
        ) {
            self.i += 1;
        }
        Some(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    fn params(&mut self) -> Option<()> {
        while self.peek() == Some(b';') {
            self.i += 1;
            self.skip_sp();
            self.key()?;
            if self.peek() == Some(b'=') {
                self.i += 1;
                self.bare_item()?;
            }
        }
        Some(())
    }

    fn inner_list(&mut self) -> Option<Item> {
        self.i += 1; // '('
        loop {
            self.skip_sp();
            if self.peek()? == b')' {
                self.i += 1;
                return Some(Item::InnerList);
            }
            self.bare_item()?;
            self.params()?;
            match self.peek()? {
                b' ' | b')' => {}
                _ => return None,
            }
        }
    }

    fn bare_item(&mut self) -> Option<Item> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string(),
            b':' => self.bytes(),
            b'?' => {
                self.i += 1;
                let v = match self.peek()? {
                    b'1' => true,
                    b'0' => false,
                    _ => return None,
                };
                self.i += 1;
                Some(Item::Boolean(v))
            }
            b'A'..=b'Z' | b'a'..=b'z' | b'*' => {
                let start = self.i;
                self.i += 1;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&c))
                {
                    self.i += 1;
                }
                Some(Item::Token(
                    String::from_utf8_lossy(&self.s[start..self.i]).into_owned(),
                ))
            }
            _ => None,
        }
    }

    fn number(&mut self) -> Option<Item> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let digits = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        if self.i == digits || self.i - digits > 15 {
            return None;
        }
        if self.peek() == Some(b'.') {
            if self.i - digits > 12 {
                return None;
            }
            self.i += 1;
            let frac = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
            if self.i == frac || self.i - frac > 3 {
                return None;
            }
            let text = std::str::from_utf8(&self.s[start..self.i]).ok()?;
            return text.parse().ok().map(Item::Decimal);
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).ok()?;
        text.parse().ok().map(Item::Integer)
    }

    fn string(&mut self) -> Option<Item> {
        self.i += 1;
        let mut out = String::new();
        loop {
            match self.peek()? {
                b'\\' => {
                    self.i += 1;
                    match self.peek()? {
                        c @ (b'"' | b'\\') => out.push(c as char),
                        _ => return None,
                    }
                }
                b'"' => {
                    self.i += 1;
                    return Some(Item::String(out));
                }
                c @ 0x20..=0x7e => out.push(c as char),
                _ => return None,
            }
            self.i += 1;
        }
    }

    fn bytes(&mut self) -> Option<Item> {
        self.i += 1;
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/' || c == b'=')
        {
            self.i += 1;
        }
        if self.peek()? != b':' {
            return None;
        }
        let v = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Some(Item::Bytes(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        assert_eq!(
            parse_dictionary("max-age=60, no-store").unwrap(),
            vec![
                ("max-age".into(), Item::Integer(60)),
                ("no-store".into(), Item::Boolean(true))
            ]
        );
        assert_eq!(
            parse_dictionary("max-age=\"60\"").unwrap(),
            vec![("max-age".into(), Item::String("60".into()))]
        );
        assert_eq!(
            parse_dictionary("private=(\"a\" \"b\");x=1").unwrap(),
            vec![("private".into(), Item::InnerList)]
        );
        assert_eq!(parse_dictionary("").unwrap(), vec![]);
        for bad in [
            "max-age=10000, &&&&&",
            "Max-Age=5",
            "max-age=5,",
            "max-age=5 no-store",
            "a=\"unterminated",
        ] {
            assert!(parse_dictionary(bad).is_none(), "{bad}");
        }
    }
}
