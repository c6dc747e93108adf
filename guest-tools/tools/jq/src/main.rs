//! A jq subset: paths, iteration, pipes, commas, comparisons, arithmetic,
//! array/object construction and the common builtins.

use std::io::Write;

use serde_json::{Map, Value};

common::describe!(b"jq: query JSON with a jq subset (paths, .[], |, select, map, keys, length...; -r raw, -c compact)");

const HELP: &str = "Usage: jq [-r] [-c] [-n] FILTER [FILE]...\nApply FILTER to each JSON value in FILEs (or standard input).\n  -r  print strings without quotes   -c  compact output   -n  use null as the input\nFilters: . .foo .\"k\" .[N] .[] .. | , ( ) [ ] {a: f, \"b\": f, c} literals\n  == != < <= > >= and or not  + - * / %  f? //\n  keys length type select(f) map(f) has(k) add first last sort sort_by(f)\n  reverse unique min max tostring tonumber to_entries from_entries values\n  empty error  ascii_downcase ascii_upcase split(s) join(s) test(s) startswith(s) endswith(s)\nExit status: 0, 2 usage or input error, 3 filter error, 5 runtime error.\n";

#[derive(Debug, Clone)]
enum Ast {
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

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

type R<T> = Result<T, String>;

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, t: &str) -> bool {
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
    fn expect(&mut self, t: &str) -> R<()> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(format!("expected `{t}` at offset {}", self.i))
        }
    }
    fn ident(&mut self) -> Option<String> {
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
    fn string(&mut self) -> R<String> {
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
    fn pipe(&mut self) -> R<Ast> {
        let mut l = self.comma()?;
        while self.eat("|") {
            l = Ast::Pipe(Box::new(l), Box::new(self.comma()?));
        }
        Ok(l)
    }
    fn comma(&mut self) -> R<Ast> {
        let mut l = self.alt()?;
        while self.eat(",") {
            l = Ast::Comma(Box::new(l), Box::new(self.alt()?));
        }
        Ok(l)
    }
    fn alt(&mut self) -> R<Ast> {
        let mut l = self.or()?;
        while self.eat("//") {
            l = Ast::Bin(Box::new(l), "//".into(), Box::new(self.or()?));
        }
        Ok(l)
    }
    fn or(&mut self) -> R<Ast> {
        let mut l = self.and()?;
        while self.eat("or") {
            l = Ast::Bin(Box::new(l), "or".into(), Box::new(self.and()?));
        }
        Ok(l)
    }
    fn and(&mut self) -> R<Ast> {
        let mut l = self.cmp()?;
        while self.eat("and") {
            l = Ast::Bin(Box::new(l), "and".into(), Box::new(self.cmp()?));
        }
        Ok(l)
    }
    fn cmp(&mut self) -> R<Ast> {
        let l = self.add()?;
        for op in ["==", "!=", "<=", ">=", "<", ">"] {
            if self.eat(op) {
                return Ok(Ast::Bin(Box::new(l), op.into(), Box::new(self.add()?)));
            }
        }
        Ok(l)
    }
    fn add(&mut self) -> R<Ast> {
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
    fn mul(&mut self) -> R<Ast> {
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
    fn postfix(&mut self) -> R<Ast> {
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
    fn suffix_after_dot(&mut self, base: Ast) -> R<Ast> {
        match self.s.get(self.i) {
            Some(b'"') => Ok(Ast::Field(Box::new(base), self.string()?)),
            Some(b'[') => self.bracket(base),
            _ => Ok(Ast::Field(
                Box::new(base),
                self.ident().ok_or("expected a field name")?,
            )),
        }
    }
    fn bracket(&mut self, base: Ast) -> R<Ast> {
        self.expect("[")?;
        if self.eat("]") {
            return Ok(Ast::Iterate(Box::new(base)));
        }
        let idx = self.pipe()?;
        self.expect("]")?;
        Ok(Ast::Index(Box::new(base), Box::new(idx)))
    }
    fn term(&mut self) -> R<Ast> {
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

fn truthy(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(false))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn num(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

fn order(a: &Value, b: &Value) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    let rank = |v: &Value| match v {
        Value::Null => 0,
        Value::Bool(false) => 1,
        Value::Bool(true) => 2,
        Value::Number(_) => 3,
        Value::String(_) => 4,
        Value::Array(_) => 5,
        Value::Object(_) => 6,
    };
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x.as_f64().partial_cmp(&y.as_f64()).unwrap_or(Equal)
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => x
            .iter()
            .zip(y)
            .map(|(p, q)| order(p, q))
            .find(|o| *o != Equal)
            .unwrap_or(x.len().cmp(&y.len())),
        _ => rank(a).cmp(&rank(b)),
    }
}

fn one(ast: &Ast, v: &Value) -> R<Value> {
    eval(ast, v)?
        .into_iter()
        .next()
        .ok_or_else(|| "expected a value".to_string())
}

fn eval(ast: &Ast, v: &Value) -> R<Vec<Value>> {
    Ok(match ast {
        Ast::Identity => vec![v.clone()],
        Ast::Recurse => {
            fn walk(v: &Value, out: &mut Vec<Value>) {
                out.push(v.clone());
                match v {
                    Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                    Value::Object(o) => o.values().for_each(|x| walk(x, out)),
                    _ => {}
                }
            }
            let mut out = Vec::new();
            walk(v, &mut out);
            out
        }
        Ast::Field(base, name) => eval(base, v)?
            .into_iter()
            .map(|b| match b {
                Value::Object(o) => Ok(o.get(name).cloned().unwrap_or(Value::Null)),
                Value::Null => Ok(Value::Null),
                other => Err(format!(
                    "Cannot index {} with \"{name}\"",
                    type_name(&other)
                )),
            })
            .collect::<R<_>>()?,
        Ast::Index(base, idx) => {
            let mut out = Vec::new();
            for b in eval(base, v)? {
                for i in eval(idx, v)? {
                    out.push(match (&b, &i) {
                        (Value::Array(a), Value::Number(n)) => {
                            let n = n.as_f64().unwrap_or(0.0) as i64;
                            let k = if n < 0 { a.len() as i64 + n } else { n };
                            a.get(k as usize)
                                .filter(|_| k >= 0)
                                .cloned()
                                .unwrap_or(Value::Null)
                        }
                        (Value::Object(o), Value::String(s)) => {
                            o.get(s).cloned().unwrap_or(Value::Null)
                        }
                        (Value::Null, _) => Value::Null,
                        _ => {
                            return Err(format!(
                                "Cannot index {} with {}",
                                type_name(&b),
                                type_name(&i)
                            ));
                        }
                    });
                }
            }
            out
        }
        Ast::Iterate(base) => {
            let mut out = Vec::new();
            for b in eval(base, v)? {
                match b {
                    Value::Array(a) => out.extend(a),
                    Value::Object(o) => out.extend(o.into_iter().map(|(_, x)| x)),
                    other => return Err(format!("Cannot iterate over {}", type_name(&other))),
                }
            }
            out
        }
        Ast::Try(e) => eval(e, v).unwrap_or_default(),
        Ast::Pipe(a, b) => {
            let mut out = Vec::new();
            for x in eval(a, v)? {
                out.extend(eval(b, &x)?);
            }
            out
        }
        Ast::Comma(a, b) => {
            let mut out = eval(a, v)?;
            out.extend(eval(b, v)?);
            out
        }
        Ast::Lit(x) => vec![x.clone()],
        Ast::Array(None) => vec![Value::Array(Vec::new())],
        Ast::Array(Some(e)) => vec![Value::Array(eval(e, v)?)],
        Ast::Object(fields) => {
            let mut objs = vec![Map::new()];
            for (k, val) in fields {
                let mut next = Vec::new();
                for o in &objs {
                    for key in eval(k, v)? {
                        let Value::String(key) = key else {
                            return Err("object keys must be strings".into());
                        };
                        for x in eval(val, v)? {
                            let mut o = o.clone();
                            o.insert(key.clone(), x);
                            next.push(o);
                        }
                    }
                }
                objs = next;
            }
            objs.into_iter().map(Value::Object).collect()
        }
        Ast::Bin(a, op, b) => {
            let mut out = Vec::new();
            if op == "//" {
                let l: Vec<Value> = eval(a, v)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(truthy)
                    .collect();
                return if l.is_empty() { eval(b, v) } else { Ok(l) };
            }
            for r in eval(b, v)? {
                for l in eval(a, v)? {
                    out.push(binop(&l, op, &r)?);
                }
            }
            out
        }
        Ast::Call(name, args) => call(name, args, v)?,
    })
}

fn binop(l: &Value, op: &str, r: &Value) -> R<Value> {
    use std::cmp::Ordering::*;
    Ok(match op {
        "==" => Value::Bool(
            order(l, r) == Equal && l == r
                || (l.is_number() && r.is_number() && order(l, r) == Equal),
        ),
        "!=" => Value::Bool(!(l == r || (l.is_number() && r.is_number() && order(l, r) == Equal))),
        "<" => Value::Bool(order(l, r) == Less),
        "<=" => Value::Bool(order(l, r) != Greater),
        ">" => Value::Bool(order(l, r) == Greater),
        ">=" => Value::Bool(order(l, r) != Less),
        "and" => Value::Bool(truthy(l) && truthy(r)),
        "or" => Value::Bool(truthy(l) || truthy(r)),
        _ => match (l, r) {
            (Value::Number(a), Value::Number(b)) => {
                let (a, b) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
                match op {
                    "+" => num(a + b),
                    "-" => num(a - b),
                    "*" => num(a * b),
                    "/" if b == 0.0 => return Err("division by zero".into()),
                    "/" => num(a / b),
                    "%" if b as i64 == 0 => return Err("modulo by zero".into()),
                    _ => num(((a as i64) % (b as i64)) as f64),
                }
            }
            (Value::String(a), Value::String(b)) if op == "+" => Value::String(format!("{a}{b}")),
            (Value::Array(a), Value::Array(b)) if op == "+" => {
                Value::Array(a.iter().chain(b).cloned().collect())
            }
            (Value::Array(a), Value::Array(b)) if op == "-" => {
                Value::Array(a.iter().filter(|x| !b.contains(x)).cloned().collect())
            }
            (Value::Object(a), Value::Object(b)) if op == "+" => {
                let mut m = a.clone();
                m.extend(b.clone());
                Value::Object(m)
            }
            (Value::Null, x) | (x, Value::Null) if op == "+" => x.clone(),
            _ => {
                return Err(format!(
                    "{} ({}) and {} ({}) cannot be combined with {op}",
                    type_name(l),
                    l,
                    type_name(r),
                    r
                ));
            }
        },
    })
}

fn call(name: &str, args: &[Ast], v: &Value) -> R<Vec<Value>> {
    let arg_str = |i: usize| -> R<String> {
        match one(&args[i], v)? {
            Value::String(s) => Ok(s),
            other => Err(format!(
                "{name}: expected a string argument, got {}",
                type_name(&other)
            )),
        }
    };
    let want = |n: usize| -> R<()> {
        if args.len() == n {
            Ok(())
        } else {
            Err(format!("{name}/{} is not defined", args.len()))
        }
    };
    let s = |v: &Value| -> R<String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(format!(
                "{name}: input must be a string, not {}",
                type_name(other)
            )),
        }
    };
    let arr = |v: &Value| -> R<Vec<Value>> {
        match v {
            Value::Array(a) => Ok(a.clone()),
            other => Err(format!(
                "{name}: input must be an array, not {}",
                type_name(other)
            )),
        }
    };
    Ok(match name {
        "empty" => vec![],
        "not" => vec![Value::Bool(!truthy(v))],
        "error" => {
            return Err(if args.is_empty() {
                v.to_string()
            } else {
                arg_str(0)?
            });
        }
        "select" => {
            want(1)?;
            if eval(&args[0], v)?.iter().any(truthy) {
                vec![v.clone()]
            } else {
                vec![]
            }
        }
        "map" => {
            want(1)?;
            let mut out = Vec::new();
            for x in arr(v)? {
                out.extend(eval(&args[0], &x)?);
            }
            vec![Value::Array(out)]
        }
        "sort_by" => {
            want(1)?;
            let mut a: Vec<(Value, Value)> = arr(v)?
                .into_iter()
                .map(|x| Ok((one(&args[0], &x)?, x)))
                .collect::<R<_>>()?;
            a.sort_by(|p, q| order(&p.0, &q.0));
            vec![Value::Array(a.into_iter().map(|p| p.1).collect())]
        }
        "has" => {
            want(1)?;
            let k = one(&args[0], v)?;
            vec![Value::Bool(match (v, &k) {
                (Value::Object(o), Value::String(s)) => o.contains_key(s),
                (Value::Array(a), Value::Number(n)) => {
                    (n.as_f64().unwrap_or(-1.0) as usize) < a.len()
                }
                _ => {
                    return Err(format!(
                        "Cannot check whether {} has a {} key",
                        type_name(v),
                        type_name(&k)
                    ));
                }
            })]
        }
        "keys" => vec![match v {
            Value::Object(o) => {
                let mut k: Vec<&String> = o.keys().collect();
                k.sort();
                Value::Array(k.into_iter().map(|s| Value::String(s.clone())).collect())
            }
            Value::Array(a) => Value::Array((0..a.len()).map(Value::from).collect()),
            other => return Err(format!("{} has no keys", type_name(other))),
        }],
        "values" => match v {
            Value::Null => vec![],
            _ => vec![v.clone()],
        },
        "length" => vec![match v {
            Value::Null => Value::from(0),
            Value::Bool(_) => return Err("boolean has no length".into()),
            Value::Number(n) => num(n.as_f64().unwrap_or(0.0).abs()),
            Value::String(s) => Value::from(s.chars().count()),
            Value::Array(a) => Value::from(a.len()),
            Value::Object(o) => Value::from(o.len()),
        }],
        "type" => vec![Value::String(type_name(v).into())],
        "add" => vec![
            arr(v)?
                .iter()
                .try_fold(Value::Null, |acc, x| binop(&acc, "+", x))?,
        ],
        "first" => vec![arr(v)?.first().cloned().unwrap_or(Value::Null)],
        "last" => vec![arr(v)?.last().cloned().unwrap_or(Value::Null)],
        "reverse" => vec![match v {
            Value::String(st) => Value::String(st.chars().rev().collect()),
            _ => Value::Array(arr(v)?.into_iter().rev().collect()),
        }],
        "sort" => {
            let mut a = arr(v)?;
            a.sort_by(order);
            vec![Value::Array(a)]
        }
        "unique" => {
            let mut a = arr(v)?;
            a.sort_by(order);
            a.dedup();
            vec![Value::Array(a)]
        }
        "min" => vec![arr(v)?.into_iter().min_by(order).unwrap_or(Value::Null)],
        "max" => vec![arr(v)?.into_iter().max_by(order).unwrap_or(Value::Null)],
        "tostring" => vec![Value::String(match v {
            Value::String(st) => st.clone(),
            other => other.to_string(),
        })],
        "tonumber" => vec![match v {
            Value::Number(_) => v.clone(),
            Value::String(st) => st
                .trim()
                .parse::<f64>()
                .map(num)
                .map_err(|_| format!("Cannot parse '{st}' as a number"))?,
            other => return Err(format!("{} cannot be parsed as a number", type_name(other))),
        }],
        "to_entries" => match v {
            Value::Object(o) => vec![Value::Array(
                o.iter()
                    .map(|(k, x)| {
                        let mut m = Map::new();
                        m.insert("key".into(), Value::String(k.clone()));
                        m.insert("value".into(), x.clone());
                        Value::Object(m)
                    })
                    .collect(),
            )],
            other => return Err(format!("{} has no keys", type_name(other))),
        },
        "from_entries" => {
            let mut m = Map::new();
            for e in arr(v)? {
                let k = e
                    .get("key")
                    .or_else(|| e.get("name"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let key = match k {
                    Value::String(st) => st,
                    other => other.to_string(),
                };
                m.insert(key, e.get("value").cloned().unwrap_or(Value::Null));
            }
            vec![Value::Object(m)]
        }
        "ascii_downcase" => vec![Value::String(s(v)?.to_ascii_lowercase())],
        "ascii_upcase" => vec![Value::String(s(v)?.to_ascii_uppercase())],
        "split" => {
            want(1)?;
            let sep = arg_str(0)?;
            vec![Value::Array(
                s(v)?
                    .split(sep.as_str())
                    .map(|p| Value::String(p.into()))
                    .collect(),
            )]
        }
        "join" => {
            want(1)?;
            let sep = arg_str(0)?;
            let parts: Vec<String> = arr(v)?
                .into_iter()
                .map(|x| match x {
                    Value::String(st) => st,
                    Value::Null => String::new(),
                    other => other.to_string(),
                })
                .collect();
            vec![Value::String(parts.join(&sep))]
        }
        "test" => {
            want(1)?;
            vec![Value::Bool(s(v)?.contains(arg_str(0)?.as_str()))]
        }
        "startswith" => {
            want(1)?;
            vec![Value::Bool(s(v)?.starts_with(arg_str(0)?.as_str()))]
        }
        "endswith" => {
            want(1)?;
            vec![Value::Bool(s(v)?.ends_with(arg_str(0)?.as_str()))]
        }
        other => return Err(format!("{other}/{} is not defined", args.len())),
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (mut raw, mut compact, mut null_input) = (false, false, false);
    let mut rest = Vec::new();
    for a in &args {
        match a.as_str() {
            "-r" => raw = true,
            "-c" => compact = true,
            "-n" => null_input = true,
            "-rc" | "-cr" => {
                raw = true;
                compact = true;
            }
            s if s.starts_with('-') && s.len() > 1 => {
                common::die("jq", 2, format!("unknown option {s}"))
            }
            s => rest.push(s.to_string()),
        }
    }
    if rest.is_empty() {
        common::die("jq", 2, "no filter given (jq --help)");
    }
    let filter = rest.remove(0);
    let mut p = Parser {
        s: filter.as_bytes(),
        i: 0,
    };
    let ast = match p.pipe() {
        Ok(a) if p.peek().is_none() => a,
        Ok(_) => common::die(
            "jq",
            3,
            format!("error: syntax error at offset {} in filter", p.i),
        ),
        Err(e) => common::die("jq", 3, format!("error: {e}")),
    };
    let mut inputs = Vec::new();
    if null_input {
        inputs.push(Value::Null);
    } else {
        if rest.is_empty() {
            rest.push("-".into());
        }
        for f in &rest {
            let data = common::read_input(f).unwrap_or_else(|e| {
                common::die(
                    "jq",
                    2,
                    format!("error: Could not open {f}: {}", common::reason(&e)),
                )
            });
            for v in serde_json::Deserializer::from_slice(&data).into_iter::<Value>() {
                match v {
                    Ok(v) => inputs.push(v),
                    Err(e) => common::die("jq", 2, format!("error (at {f}): {e}")),
                }
            }
        }
    }
    let mut out = std::io::stdout().lock();
    for input in inputs {
        match eval(&ast, &input) {
            Ok(results) => {
                for r in results {
                    let text = match (&r, raw) {
                        (Value::String(s), true) => s.clone(),
                        _ if compact => r.to_string(),
                        _ => serde_json::to_string_pretty(&r).unwrap_or_default(),
                    };
                    let _ = writeln!(out, "{text}");
                }
            }
            Err(e) => {
                let _ = out.flush();
                common::die("jq", 5, format!("error: {e}"));
            }
        }
    }
}
