//! A page's ESI template, parsed once from its stored body.
//!
//! ## Model
//! The body is split into [`Node`]s: text between ESI elements (slices of
//! the body's own bytes, never copied), includes, `<esi:vars>` text,
//! `<esi:choose>` and `<esi:try>`. `<esi:remove>` and `<esi:comment>` are
//! gone at parse time; `<!--esi ... -->` is replaced by its content,
//! parsed as ESI. Anything malformed (an unclosed element, an unknown
//! `esi:` element, a bad attribute or `test`, nesting past
//! [`MAX_NESTING`]) fails the whole parse: the page is then served as the
//! text it is, never half processed. The parser only moves forward, so
//! any input ends in time proportional to its length.

use bytes::Bytes;

use super::expr::{self, Expr};
use super::vars::{parse_text, Text};

/// Elements inside elements at most this deep.
pub const MAX_NESTING: usize = 16;

/// A parsed template.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Template {
    /// Its nodes, in document order.
    pub nodes: Vec<Node>,
    /// Include elements in it (every branch counted).
    pub includes: usize,
}

/// A part of a template.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// Bytes sent as they are.
    Text(Bytes),
    /// `<esi:vars>` text: variables replaced.
    Vars(Text),
    /// `<esi:include>`.
    Include(Include),
    /// `<esi:choose>`: the first `when` whose test holds, else `otherwise`.
    Choose {
        /// `(test, nodes)` in order.
        whens: Vec<(Expr, Vec<Node>)>,
        /// `<esi:otherwise>`.
        otherwise: Vec<Node>,
    },
    /// `<esi:try>`: `attempt`, or `except` when one of its includes fails.
    Try {
        /// `<esi:attempt>`.
        attempt: Vec<Node>,
        /// `<esi:except>`.
        except: Vec<Node>,
    },
}

/// `<esi:include src alt onerror>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Include {
    /// The fragment's URL (variables allowed).
    pub src: Text,
    /// Tried when `src` fails.
    pub alt: Option<Text>,
    /// `onerror="continue"`: a failure is dropped silently.
    pub continue_on_error: bool,
}

/// Why a body is not a template (logged; the page goes out as text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// Where, in bytes from the start of the body.
    pub at: usize,
    /// What.
    pub what: &'static str,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

/// `body` parsed.
pub fn parse(body: &Bytes) -> Result<Template, Malformed> {
    let mut p = Parser {
        src: body.clone(),
        at: 0,
        depth: 0,
        includes: 0,
    };
    let nodes = p.nodes(None, false)?;
    Ok(Template {
        nodes,
        includes: p.includes,
    })
}

/// Does the body hold any ESI markup? (A page without any is served as it
/// is, with no assembly.)
pub fn has_markup(body: &[u8]) -> bool {
    memchr::memmem::find(body, b"<esi:").is_some()
        || memchr::memmem::find(body, b"<!--esi").is_some()
}

/// Where the next ESI element, end tag or `<!--esi` starts.
fn next_markup(hay: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'<', &hay[from..]) {
        let at = from + i;
        let rest = &hay[at..];
        if rest.starts_with(b"<esi:") || rest.starts_with(b"</esi:") || rest.starts_with(b"<!--esi")
        {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

struct Parser {
    src: Bytes,
    at: usize,
    depth: usize,
    includes: usize,
}

/// A start tag: its name, attributes and whether it closed itself (`/>`).
struct Tag {
    name: String,
    attrs: Vec<(String, String)>,
    empty: bool,
}

impl Tag {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Parser {
    fn bad(&self, what: &'static str) -> Malformed {
        Malformed { at: self.at, what }
    }

    fn rest(&self) -> &[u8] {
        &self.src[self.at..]
    }

    /// Nodes up to `</esi:{until}>` (consumed), or to the end when `until`
    /// is `None`. In `vars`, text has its variables parsed.
    fn nodes(&mut self, until: Option<&str>, vars: bool) -> Result<Vec<Node>, Malformed> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.bad("elements nested too deep"));
        }
        let mut out = Vec::new();
        loop {
            let next = next_markup(self.rest());
            let text_end = next.map_or(self.src.len(), |n| self.at + n);
            if text_end > self.at {
                let text = self.src.slice(self.at..text_end);
                if vars {
                    let t = parse_text(&text).ok_or_else(|| self.bad("unclosed $( in esi:vars"))?;
                    out.push(Node::Vars(t));
                } else {
                    out.push(Node::Text(text));
                }
                self.at = text_end;
            }
            if next.is_none() {
                if until.is_some() {
                    return Err(self.bad("element not closed"));
                }
                break;
            }
            if self.rest().starts_with(b"</esi:") {
                let name = self.end_tag()?;
                if Some(name.as_str()) != until {
                    return Err(self.bad("end tag without its start"));
                }
                break;
            }
            if self.rest().starts_with(b"<!--esi") {
                let body_start = self.at + 7;
                let close = memchr::memmem::find(&self.src[body_start..], b"-->")
                    .ok_or_else(|| self.bad("<!--esi not closed"))?;
                let inner = self.src.slice(body_start..body_start + close);
                let mut sub = Parser {
                    src: inner,
                    at: 0,
                    depth: self.depth,
                    includes: 0,
                };
                let nodes = sub.nodes(None, vars).map_err(|mut e| {
                    e.at += body_start;
                    e
                })?;
                self.includes += sub.includes;
                out.extend(nodes);
                self.at = body_start + close + 3;
                continue;
            }
            let tag = self.start_tag()?;
            self.element(tag, vars, &mut out)?;
        }
        self.depth -= 1;
        Ok(out)
    }

    /// The element that `tag` starts, its content consumed.
    fn element(&mut self, tag: Tag, vars: bool, out: &mut Vec<Node>) -> Result<(), Malformed> {
        match tag.name.as_str() {
            "include" => {
                let src = tag
                    .attr("src")
                    .ok_or_else(|| self.bad("esi:include without src"))?;
                let text = |s: &str| parse_text(&Bytes::copy_from_slice(s.as_bytes()));
                let src = text(src).ok_or_else(|| self.bad("bad variable in src"))?;
                let alt = match tag.attr("alt") {
                    Some(a) => Some(text(a).ok_or_else(|| self.bad("bad variable in alt"))?),
                    None => None,
                };
                let continue_on_error = tag.attr("onerror") == Some("continue");
                if !tag.empty {
                    self.skip_to_end("include")?;
                }
                self.includes += 1;
                out.push(Node::Include(Include {
                    src,
                    alt,
                    continue_on_error,
                }));
            }
            "remove" | "comment" => {
                if !tag.empty {
                    self.skip_to_end(&tag.name)?;
                }
            }
            "vars" => {
                if !tag.empty {
                    out.extend(self.nodes(Some("vars"), true)?);
                }
            }
            "try" => {
                let (mut attempt, mut except) = (None, None);
                loop {
                    self.skip_ws();
                    if self.rest().starts_with(b"</esi:") {
                        if self.end_tag()? != "try" {
                            return Err(self.bad("end tag without its start"));
                        }
                        break;
                    }
                    let t = self.start_tag()?;
                    let slot = match t.name.as_str() {
                        "attempt" => &mut attempt,
                        "except" => &mut except,
                        _ => return Err(self.bad("esi:try holds only attempt and except")),
                    };
                    let nodes = if t.empty {
                        Vec::new()
                    } else {
                        self.nodes(Some(&t.name), vars)?
                    };
                    if slot.replace(nodes).is_some() {
                        return Err(self.bad("esi:try with two of the same branch"));
                    }
                }
                out.push(Node::Try {
                    attempt: attempt.ok_or_else(|| self.bad("esi:try without attempt"))?,
                    except: except.unwrap_or_default(),
                });
            }
            "choose" => {
                let (mut whens, mut otherwise) = (Vec::new(), None);
                loop {
                    self.skip_ws();
                    if self.rest().starts_with(b"</esi:") {
                        if self.end_tag()? != "choose" {
                            return Err(self.bad("end tag without its start"));
                        }
                        break;
                    }
                    let t = self.start_tag()?;
                    match t.name.as_str() {
                        "when" => {
                            let test = t
                                .attr("test")
                                .ok_or_else(|| self.bad("esi:when without test"))?;
                            let test =
                                expr::parse(test).ok_or_else(|| self.bad("bad esi:when test"))?;
                            let nodes = if t.empty {
                                Vec::new()
                            } else {
                                self.nodes(Some("when"), vars)?
                            };
                            whens.push((test, nodes));
                        }
                        "otherwise" => {
                            let nodes = if t.empty {
                                Vec::new()
                            } else {
                                self.nodes(Some("otherwise"), vars)?
                            };
                            if otherwise.replace(nodes).is_some() {
                                return Err(self.bad("esi:choose with two otherwise"));
                            }
                        }
                        _ => return Err(self.bad("esi:choose holds only when and otherwise")),
                    }
                }
                if whens.is_empty() {
                    return Err(self.bad("esi:choose without when"));
                }
                out.push(Node::Choose {
                    whens,
                    otherwise: otherwise.unwrap_or_default(),
                });
            }
            _ => return Err(self.bad("unknown esi element")),
        }
        Ok(())
    }

    fn skip_ws(&mut self) {
        while self.src.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    /// Past `</esi:{name}>`, whatever comes before it.
    fn skip_to_end(&mut self, name: &str) -> Result<(), Malformed> {
        let end = format!("</esi:{name}>");
        let at = memchr::memmem::find(self.rest(), end.as_bytes())
            .ok_or_else(|| self.bad("element not closed"))?;
        self.at += at + end.len();
        Ok(())
    }

    /// `</esi:NAME>` at `at`, consumed: its name.
    fn end_tag(&mut self) -> Result<String, Malformed> {
        let rest = &self.src[self.at + 6..];
        let close = rest
            .iter()
            .position(|&b| b == b'>')
            .ok_or_else(|| self.bad("end tag not closed"))?;
        let name = std::str::from_utf8(&rest[..close])
            .map_err(|_| self.bad("bad end tag"))?
            .trim()
            .to_owned();
        self.at += 6 + close + 1;
        Ok(name)
    }

    /// `<esi:NAME attr="v" ...>` or `.../>` at `at`, consumed.
    fn start_tag(&mut self) -> Result<Tag, Malformed> {
        if !self.rest().starts_with(b"<esi:") {
            return Err(self.bad("expected an esi element"));
        }
        self.at += 5;
        let name_len = self
            .rest()
            .iter()
            .position(|b| !b.is_ascii_lowercase())
            .unwrap_or(self.rest().len());
        let name = String::from_utf8_lossy(&self.rest()[..name_len]).into_owned();
        if name.is_empty() {
            return Err(self.bad("esi element without a name"));
        }
        self.at += name_len;
        let mut attrs = Vec::new();
        loop {
            self.skip_ws();
            let rest = self.rest();
            if rest.starts_with(b"/>") {
                self.at += 2;
                return Ok(Tag {
                    name,
                    attrs,
                    empty: true,
                });
            }
            if rest.starts_with(b">") {
                self.at += 1;
                return Ok(Tag {
                    name,
                    attrs,
                    empty: false,
                });
            }
            let n_len = rest
                .iter()
                .position(|b| !(b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_'))
                .ok_or_else(|| self.bad("tag not closed"))?;
            if n_len == 0 {
                return Err(self.bad("bad attribute"));
            }
            let attr = String::from_utf8_lossy(&rest[..n_len]).into_owned();
            self.at += n_len;
            self.skip_ws();
            if self.src.get(self.at) != Some(&b'=') {
                return Err(self.bad("attribute without a value"));
            }
            self.at += 1;
            self.skip_ws();
            let quote = match self.src.get(self.at) {
                Some(&q @ (b'"' | b'\'')) => q,
                _ => return Err(self.bad("attribute value not quoted")),
            };
            self.at += 1;
            let len = self
                .rest()
                .iter()
                .position(|&b| b == quote)
                .ok_or_else(|| self.bad("attribute value not closed"))?;
            let value = std::str::from_utf8(&self.rest()[..len])
                .map_err(|_| self.bad("attribute value not UTF-8"))?
                .replace("&amp;", "&");
            self.at += len + 1;
            attrs.push((attr, value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &'static str) -> Result<Template, Malformed> {
        parse(&Bytes::from_static(s.as_bytes()))
    }

    #[test]
    fn elements_parse_into_nodes() {
        let t = p(concat!(
            "<p>a</p><esi:include src=\"/f1\" onerror=\"continue\"/>",
            "<esi:remove><a href=/x>x</a></esi:remove>",
            "<esi:comment text=\"hi\"/>",
            "<!--esi <b><esi:include src='/f2' alt='/f3'></esi:include></b> -->",
            "<esi:vars>$(HTTP_HOST)</esi:vars>",
            "<esi:try><esi:attempt><esi:include src=\"/f4\"/></esi:attempt>",
            "<esi:except>down</esi:except></esi:try>",
            "<esi:choose><esi:when test=\"$(HTTP_COOKIE{a})=='1'\">one</esi:when>",
            "<esi:otherwise>other</esi:otherwise></esi:choose>end"
        ))
        .unwrap();
        assert_eq!(t.includes, 3);
        let kinds: Vec<&str> = t
            .nodes
            .iter()
            .map(|n| match n {
                Node::Text(_) => "text",
                Node::Vars(_) => "vars",
                Node::Include(_) => "include",
                Node::Choose { .. } => "choose",
                Node::Try { .. } => "try",
            })
            .collect();
        assert_eq!(
            kinds,
            ["text", "include", "text", "include", "text", "vars", "try", "choose", "text"]
        );
        let Node::Include(i) = &t.nodes[3] else {
            panic!()
        };
        assert!(i.alt.is_some() && !i.continue_on_error);
    }

    #[test]
    fn malformed_markup_fails_the_parse_and_ends() {
        for bad in [
            "<esi:include src=\"/a\"",
            "<esi:include/>",
            "<esi:remove>never closed",
            "<esi:vars>$(HTTP_HOST</esi:vars>",
            "<esi:try><esi:except>x</esi:except></esi:try>",
            "<esi:choose><esi:when test=\"((\">x</esi:when></esi:choose>",
            "<esi:bogus/>",
            "</esi:try>",
            "<!--esi <esi:include src=/x/> ",
            "<esi:include src=/unquoted/>",
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
        let deep = "<esi:vars>".repeat(100);
        assert!(parse(&Bytes::from(deep)).is_err());
        assert_eq!(p("<p>plain</p>").unwrap().nodes.len(), 1);
        assert!(!has_markup(b"<p>plain</p>") && has_markup(b"x<!--esi y-->"));
    }
}
