//! The builtins (`keys`, `map(f)`, `select(f)`, ...).

use super::*;

pub(crate) fn call(name: &str, args: &[Ast], v: &Value) -> R<Vec<Value>> {
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
