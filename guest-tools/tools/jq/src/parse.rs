//! The filter's syntax: `Ast`, and the parser that builds it.

use super::*;

#[derive(Debug, Clone)]
pub(crate) enum Ast {
    Identity,
    Recurse,
    Field(Box<Ast>, String),
    Index(Box<Ast>, Box<Ast>),
    Iterate(Box<Ast>),
    Try(Box<Ast>),
    Pipe(Box<Ast>, Box<Ast>),
    Comma(Box<Ast>, Box<Ast>),
    Lit(Value),
    Array(Option<Box<Ast>>),
    Object(Vec<(Ast, Ast)>),
    Bin(Box<Ast>, String, Box<Ast>),
    Call(String, Vec<Ast>),
}

pub(crate) struct Parser<'a> {
    pub(crate) s: &'a [u8],
    pub(crate) i: usize,
}

pub(crate) type R<T> = Result<T, String>;

impl<'a> Parser<'a> {
    pub(crate) fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    pub(crate) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }
    pub(crate) fn eat(&mut self, t: &str) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(t.as_bytes()) {
            // keywords must not run into an identifier
            let end = self.i + t.len();
            if t.bytes().all(|b| b.is_ascii_alphabetic())
                && self
                    .s
                    .get(end)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
            {
                return false;
            }
            self.i = end;
            true
        } else {
            false
        }
    }
    pub(crate) fn expect(&mut self, t: &str) -> R<()> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(format!("expected `{t}` at offset {}", self.i))
        }
    }
    pub(crate) fn ident(&mut self) -> Option<String> {
        self.ws();
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_')
        {
            if self.i == start && self.s[self.i].is_ascii_digit() {
                break;
            }
            self.i += 1;
        }
        (self.i > start).then(|| String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }
    pub(crate) fn string(&mut self) -> R<String> {
        self.ws();
        let start = self.i;
        self.i += 1;
        let mut esc = false;
        while self.i < self.s.len() {
            let c = self.s[self.i];
            self.i += 1;
            if esc {
                esc = false;
            } else if c == b'\\' {
                esc = true;
            } else if c == b'"' {
                return serde_json::from_slice(&self.s[start..self.i]).map_err(|e| e.to_string());
            }
        }
        Err("unterminated string".into())
    }
    pub(crate) fn pipe(&mut self) -> R<Ast> {
        let mut l = self.comma()?;
        while self.eat("|") {
            l = Ast::Pipe(Box::new(l), Box::new(self.comma()?));
        }
        Ok(l)
    }
    pub(crate) fn comma(&mut self) -> R<Ast> {
        let mut l = self.alt()?;
        while self.eat(",") {
            l = Ast::Comma(Box::new(l), Box::new(self.alt()?));
        }
        Ok(l)
    }
    pub(crate) fn alt(&mut self) -> R<Ast> {
        let mut l = self.or()?;
        while self.eat("//") {
            l = Ast::Bin(Box::new(l), "//".into(), Box::new(self.or()?));
        }
        Ok(l)
    }
    pub(crate) fn or(&mut self) -> R<Ast> {
        let mut l = self.and()?;
        while self.eat("or") {
            l = Ast::Bin(Box::new(l), "or".into(), Box::new(self.and()?));
        }
        Ok(l)
    }
    pub(crate) fn and(&mut self) -> R<Ast> {
        let mut l = self.cmp()?;
        while self.eat("and") {
            l = Ast::Bin(Box::new(l), "and".into(), Box::new(self.cmp()?));
        }
        Ok(l)
    }
    pub(crate) fn cmp(&mut self) -> R<Ast> {
        let l = self.add()?;
        for op in ["==", "!=", "<=", ">=", "<", ">"] {
            if self.eat(op) {
                return Ok(Ast::Bin(Box::new(l), op.into(), Box::new(self.add()?)));
            }
        }
        Ok(l)
    }
    pub(crate) fn add(&mut self) -> R<Ast> {
        let mut l = self.mul()?;
        loop {
            if self.peek() == Some(b'/') && self.s.get(self.i + 1) == Some(&b'/') {
                return Ok(l);
            }
            let op = if self.eat("+") {
                "+"
            } else if self.eat("-") {
                "-"
            } else {
                return Ok(l);
            };
            l = Ast::Bin(Box::new(l), op.into(), Box::new(self.mul()?));
        }
    }
    pub(crate) fn mul(&mut self) -> R<Ast> {
        let mut l = self.postfix()?;
        loop {
            if self.peek() == Some(b'/') && self.s.get(self.i + 1) == Some(&b'/') {
                return Ok(l);
            }
            let op = if self.eat("*") {
                "*"
            } else if self.eat("/") {
                "/"
            } else if self.eat("%") {
                "%"
            } else {
                return Ok(l);
            };
            l = Ast::Bin(Box::new(l), op.into(), Box::new(self.postfix()?));
        }
    }
    pub(crate) fn postfix(&mut self) -> R<Ast> {
        let mut t = self.term()?;
        loop {
            if self.peek() == Some(b'.')
                && self.s.get(self.i + 1).is_some_and(|c| {
                    c.is_ascii_alphabetic() || *c == b'_' || *c == b'"' || *c == b'['
                })
            {
                self.i += 1;
                t = self.suffix_after_dot(t)?;
            } else if self.peek() == Some(b'[') {
                t = self.bracket(t)?;
            } else if self.eat("?") {
                t = Ast::Try(Box::new(t));
            } else {
                return Ok(t);
            }
        }
    }
    pub(crate) fn suffix_after_dot(&mut self, base: Ast) -> R<Ast> {
        match self.s.get(self.i) {
            Some(b'"') => Ok(Ast::Field(Box::new(base), self.string()?)),
            Some(b'[') => self.bracket(base),
            _ => Ok(Ast::Field(
                Box::new(base),
                self.ident().ok_or("expected a field name")?,
            )),
        }
    }
    pub(crate) fn bracket(&mut self, base: Ast) -> R<Ast> {
        self.expect("[")?;
        if self.eat("]") {
            return Ok(Ast::Iterate(Box::new(base)));
        }
        let idx = self.pipe()?;
        self.expect("]")?;
        Ok(Ast::Index(Box::new(base), Box::new(idx)))
    }
    pub(crate) fn term(&mut self) -> R<Ast> {
        match self.peek().ok_or("unexpected end of filter")? {
            b'.' => {
                if self.eat("..") {
                    return Ok(Ast::Recurse);
                }
                self.i += 1;
                match self.s.get(self.i) {
                    Some(c)
                        if c.is_ascii_alphabetic() || *c == b'_' || *c == b'"' || *c == b'[' =>
                    {
                        self.suffix_after_dot(Ast::Identity)
                    }
                    _ => Ok(Ast::Identity),
                }
            }
            b'"' => Ok(Ast::Lit(Value::String(self.string()?))),
            b'(' => {
                self.i += 1;
                let e = self.pipe()?;
                self.expect(")")?;
                Ok(e)
            }
            b'[' => {
                self.i += 1;
                if self.eat("]") {
                    return Ok(Ast::Array(None));
                }
                let e = self.pipe()?;
                self.expect("]")?;
                Ok(Ast::Array(Some(Box::new(e))))
            }
            b'{' => {
                self.i += 1;
                let mut fields = Vec::new();
                if !self.eat("}") {
                    loop {
                        let key = if self.peek() == Some(b'"') {
                            Ast::Lit(Value::String(self.string()?))
                        } else if self.eat("(") {
                            let k = self.pipe()?;
                            self.expect(")")?;
                            k
                        } else {
                            Ast::Lit(Value::String(self.ident().ok_or("expected an object key")?))
                        };
                        let val = if self.eat(":") {
                            self.alt()?
                        } else if let Ast::Lit(Value::String(k)) = &key {
                            Ast::Field(Box::new(Ast::Identity), k.clone())
                        } else {
                            return Err("expected `:`".into());
                        };
                        fields.push((key, val));
                        if self.eat("}") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Ok(Ast::Object(fields))
            }
            c if c.is_ascii_digit() || c == b'-' => {
                let start = self.i;
                self.i += 1;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_digit() || b".eE+-".contains(&self.s[self.i]))
                {
                    self.i += 1;
                }
                serde_json::from_slice(&self.s[start..self.i])
                    .map(Ast::Lit)
                    .map_err(|_| format!("bad number at offset {start}"))
            }
            _ => {
                let name = self
                    .ident()
                    .ok_or_else(|| format!("unexpected input at offset {}", self.i))?;
                match name.as_str() {
                    "true" => return Ok(Ast::Lit(Value::Bool(true))),
                    "false" => return Ok(Ast::Lit(Value::Bool(false))),
                    "null" => return Ok(Ast::Lit(Value::Null)),
                    _ => {}
                }
                let mut args = Vec::new();
                if self.eat("(") {
                    loop {
                        args.push(self.pipe()?);
                        if self.eat(")") {
                            break;
                        }
                        self.expect(";")?;
                    }
                }
                Ok(Ast::Call(name, args))
            }
        }
    }
}
