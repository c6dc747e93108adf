//! Reading TOML through serde: the helpers the derived `Deserialize` impls
//! name for values serde has no type for (seconds, `FromStr` names), the
//! key list read back from those impls, and where a file was read from.
//!
//! Types are checked here, as the file is read, and each error carries its
//! key path (`docker.imgae`, `env_allowlist[0]`) through
//! `serde_path_to_error`. Values (ranges, shapes, root) are checked by
//! `SandboxConfig::validate`, which also runs on configs built in code.

use std::marker::PhantomData;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::{ConfigError, MAX_TIMEOUT_SECS};

/// Where a config file was read from, for the state checks: the dir it names
/// resolved (so `../toolhost.toml` is the dir above, not a path with `..`
/// the checks would refuse), with the file's own name kept, so that a
/// symlink by that name still counts where it sits.
pub(super) fn where_read(path: &Path) -> std::path::PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or(absolute.clone()),
        _ => absolute,
    }
}

pub(super) fn check_duration(key: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() || d.as_secs_f64() > MAX_TIMEOUT_SECS {
        return Err(ConfigError::key(
            key,
            format!("must be more than 0 and at most {MAX_TIMEOUT_SECS} seconds"),
        ));
    }
    Ok(())
}

/// A number of seconds, integer or float, more than 0 and at most
/// [`MAX_TIMEOUT_SECS`] (checked here: a NaN or a huge float is no
/// `Duration`).
pub(super) fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    struct Seconds;
    impl Visitor<'_> for Seconds {
        type Value = Duration;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number of seconds")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            self.visit_f64(v as f64)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            self.visit_f64(v as f64)
        }
        fn visit_f64<E: de::Error>(self, secs: f64) -> Result<Duration, E> {
            if !secs.is_finite() || secs <= 0.0 || secs > MAX_TIMEOUT_SECS {
                return Err(E::custom(format!(
                    "must be more than 0 and at most {MAX_TIMEOUT_SECS} seconds (got {secs})"
                )));
            }
            Ok(Duration::from_secs_f64(secs))
        }
    }
    d.deserialize_any(Seconds)
}

/// A duration written as a number of seconds (what [`seconds`] reads).
pub(super) fn as_seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// A string read as `T` by its `FromStr`, whose error says what is wrong.
pub(super) fn parsed<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: std::fmt::Display,
{
    struct Parsed<T>(PhantomData<T>);
    impl<T: FromStr<Err: std::fmt::Display>> Visitor<'_> for Parsed<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            v.parse().map_err(E::custom)
        }
    }
    d.deserialize_str(Parsed(PhantomData))
}

/// An isolation level by its config name.
pub(super) fn isolation<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<crate::isolation::IsolationLevel, D::Error> {
    let s = String::deserialize(d)?;
    crate::isolation::IsolationLevel::parse(&s).ok_or_else(|| {
        de::Error::custom(format!(
            "{s:?} is not one of \"strict\", \"best-effort\", \"off\""
        ))
    })
}

/// A list of strings, each read as `T`; an error names the list (the
/// entry is in the message).
pub(super) fn parsed_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let names: Vec<String> = Vec::deserialize(d)?;
    names
        .iter()
        .map(|n| n.parse().map_err(de::Error::custom))
        .collect()
}

/// A value that, when given, is `Some` (an empty string is refused by
/// `validate`, not read as "unset"); JSON's `null` is `None`, as the key
/// left out (TOML has no null).
pub(super) fn some<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// A section as a table only: a derived struct would also take an array
/// of its fields in order (`wasm = [["/x"]]`), which no reader of a config
/// expects.
pub(super) fn table<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Table<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Table<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a table")
        }
        fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(Table(PhantomData))
}

/// The field names a derived `Deserialize` impl accepts, read back from it:
/// the key list is the struct, never a copy of it.
pub(super) fn field_names<'de, T: serde::Deserialize<'de>>() -> &'static [&'static str] {
    struct Fields(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> Deserializer<'de> for &mut Fields {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0 = Some(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    let mut f = Fields(None);
    let _ = T::deserialize(&mut f);
    f.0.unwrap_or(&[])
}
