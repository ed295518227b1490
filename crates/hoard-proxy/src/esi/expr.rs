//! `<esi:when test="...">` expressions (ESI 1.0 §3.3): comparisons
//! (`==`, `!=`, `<`, `<=`, `>`, `>=`) of variables, quoted strings and
//! numbers, joined by `&`, `|` and `!`, grouped with parentheses.
//!
//! Pure: parsed once with the template, evaluated per request against its
//! [`Values`]. Two operands that both read as numbers compare as numbers,
//! otherwise as strings; an operand alone is true when it is not empty.

use super::vars::{Values, Var};

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A quoted string or a number.
    Lit(String),
    /// A variable.
    Var(Var),
    /// `!a`.
    Not(Box<Expr>),
    /// `a & b`.
    And(Box<Expr>, Box<Expr>),
    /// `a | b`.
    Or(Box<Expr>, Box<Expr>),
    /// `a OP b`.
    Cmp(Op, Box<Expr>, Box<Expr>),
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// Nesting at most this deep (parentheses and `!`): a hostile template
/// cannot exhaust the stack.
const MAX_NESTING: usize = 32;

/// `s` parsed; `None` when it is not an expression.
pub fn parse(s: &str) -> Option<Expr> {
    let mut p = Parser {
        b: s.as_bytes(),
        at: 0,
        nesting: 0,
    };
    let e = p.or()?;
    p.skip_ws();
    (p.at == p.b.len()).then_some(e)
}

struct Parser<'a> {
    b: &'a [u8],
    at: usize,
    nesting: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.b.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, t: &str) -> bool {
        self.skip_ws();
        if self.b[self.at..].starts_with(t.as_bytes()) {
            self.at += t.len();
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Option<Expr> {
        let mut e = self.and()?;
        while self.eat("|") {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Some(e)
    }

    fn and(&mut self) -> Option<Expr> {
        let mut e = self.not()?;
        while self.eat("&") {
            e = Expr::And(Box::new(e), Box::new(self.not()?));
        }
        Some(e)
    }

    fn not(&mut self) -> Option<Expr> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return None;
        }
        let e = if self.eat("!") && !self.b[self.at..].starts_with(b"=") {
            Expr::Not(Box::new(self.not()?))
        } else {
            self.cmp()?
        };
        self.nesting -= 1;
        Some(e)
    }

    fn cmp(&mut self) -> Option<Expr> {
        let a = self.operand()?;
        for (t, op) in [
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("<", Op::Lt),
            (">", Op::Gt),
        ] {
            if self.eat(t) {
                let b = self.operand()?;
                return Some(Expr::Cmp(op, Box::new(a), Box::new(b)));
            }
        }
        Some(a)
    }

    fn operand(&mut self) -> Option<Expr> {
        self.skip_ws();
        let rest = &self.b[self.at..];
        match rest.first()? {
            b'(' => {
                self.at += 1;
                let e = self.or()?;
                self.eat(")").then_some(e)
            }
            b'\'' => {
                let end = rest[1..].iter().position(|&c| c == b'\'')?;
                let s = std::str::from_utf8(&rest[1..1 + end]).ok()?.to_owned();
                self.at += end + 2;
                Some(Expr::Lit(s))
            }
            b'$' => {
                let (v, end) = super::vars::parse_var(self.b, self.at)?;
                self.at = end;
                Some(Expr::Var(v))
            }
            c if c.is_ascii_digit() || *c == b'-' || *c == b'.' => {
                let len = rest
                    .iter()
                    .position(|c| !(c.is_ascii_digit() || *c == b'.' || *c == b'-'))
                    .unwrap_or(rest.len());
                let s = std::str::from_utf8(&rest[..len]).ok()?;
                s.parse::<f64>().ok()?;
                self.at += len;
                Some(Expr::Lit(s.to_owned()))
            }
            _ => None,
        }
    }
}

impl Expr {
    /// True for a request with these values.
    pub fn holds(&self, values: &Values) -> bool {
        match self {
            Expr::Not(e) => !e.holds(values),
            Expr::And(a, b) => a.holds(values) && b.holds(values),
            Expr::Or(a, b) => a.holds(values) || b.holds(values),
            Expr::Cmp(op, a, b) => {
                let (a, b) = (a.value(values), b.value(values));
                let ord = match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
                    (Ok(x), Ok(y)) => x.partial_cmp(&y),
                    _ => Some(a.as_str().cmp(b.as_str())),
                };
                let Some(ord) = ord else { return false };
                match op {
                    Op::Eq => ord.is_eq(),
                    Op::Ne => ord.is_ne(),
                    Op::Lt => ord.is_lt(),
                    Op::Le => ord.is_le(),
                    Op::Gt => ord.is_gt(),
                    Op::Ge => ord.is_ge(),
                }
            }
            e => !e.value(values).is_empty(),
        }
    }

    fn value(&self, values: &Values) -> String {
        match self {
            Expr::Lit(s) => s.clone(),
            Expr::Var(v) => values.get(v).into_owned(),
            e => if e.holds(values) { "true" } else { "" }.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderMap, COOKIE};

    #[test]
    fn tests_compare_and_combine() {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, "group=gold; visits=12".parse().unwrap());
        let v = Values::of(&h, "example.com", Some("lang=de"));
        let t = |s: &str| parse(s).unwrap_or_else(|| panic!("{s}")).holds(&v);
        assert!(t("$(HTTP_COOKIE{group})=='gold'"));
        assert!(!t("$(HTTP_COOKIE{group}) == 'silver'"));
        assert!(t("$(HTTP_COOKIE{visits}) > 9"), "numbers, not strings");
        assert!(t(
            "$(HTTP_COOKIE{visits}) >= 12 & $(QUERY_STRING{lang}) != 'en'"
        ));
        assert!(t("!($(HTTP_COOKIE{none}) == 'x') | 1 == 2"));
        assert!(t("$(HTTP_COOKIE{group})"), "set");
        assert!(!t("$(HTTP_COOKIE{none})"), "unset");
        for bad in [
            "",
            "'open",
            "1 ==",
            "(1 == 1",
            "1 == 1 junk",
            "$(HTTP_HOST",
            "&",
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
        let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
        assert!(parse(&deep).is_none(), "nesting bounded");
    }
}
