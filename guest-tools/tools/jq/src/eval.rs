//! Evaluation: a filter applied to a value gives a stream of values.

use super::*;

pub(crate) fn truthy(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(false))
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub(crate) fn num(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

pub(crate) fn order(a: &Value, b: &Value) -> std::cmp::Ordering {
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

pub(crate) fn one(ast: &Ast, v: &Value) -> R<Value> {
    eval(ast, v)?
        .into_iter()
        .next()
        .ok_or_else(|| "expected a value".to_string())
}

pub(crate) fn eval(ast: &Ast, v: &Value) -> R<Vec<Value>> {
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

pub(crate) fn binop(l: &Value, op: &str, r: &Value) -> R<Value> {
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
