//! Reading what servers send (docs/untrusted-input.md): a field of the wrong
//! kind is read as absent rather than failing the whole answer, and nothing is
//! built that the harness does not keep — a container where a scalar belongs is
//! parsed past, and a list keeps at most a fixed number of items. A parsed tree
//! (`serde_json::Value`) is never built from a server's answer: it costs many
//! times the text's size, so a body under the cap could still flood memory.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Number;

/// A value where a scalar belongs. Lists and objects are skipped, not built.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Text(String),
    Number(Number),
    Bool(bool),
    /// `null`, a list or an object.
    Absent,
}

impl Scalar {
    /// A string as is; a number or a boolean written out.
    pub(crate) fn into_text(self) -> Option<String> {
        match self {
            Scalar::Text(s) => Some(s),
            Scalar::Number(n) => Some(n.to_string()),
            Scalar::Bool(b) => Some(b.to_string()),
            Scalar::Absent => None,
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, s: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<Scalar, E> {
                Ok(Scalar::Text(s))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Scalar, E> {
                Ok(Scalar::Number(n.into()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Scalar, E> {
                Ok(Scalar::Number(n.into()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Scalar, E> {
                Ok(Number::from_f64(n).map_or(Scalar::Absent, Scalar::Number))
            }
            fn visit_bool<E>(self, b: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(b))
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Absent)
            }
            fn visit_none<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Absent)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Scalar, D::Error> {
                Scalar::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Absent)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Absent)
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A count: a non-negative integer, or a non-negative number saturated into
/// one; anything else (negative, text, null, a container) is absent.
pub fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(match Scalar::deserialize(d)? {
        Scalar::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        _ => None,
    })
}

/// A count where absent reads as 0.
pub fn count_or_zero<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(count(d)?.unwrap_or(0))
}

/// Any number as `f64`.
pub fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(match Scalar::deserialize(d)? {
        Scalar::Number(n) => n.as_f64(),
        _ => None,
    })
}

/// Text: a string, or a number or boolean written out; else absent.
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Scalar::deserialize(d)?.into_text())
}

/// Text where absent reads as empty.
pub fn text_or_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(text(d)?.unwrap_or_default())
}

/// The most strings [`texts`] keeps.
pub(crate) const MAX_TEXTS: usize = 64;

/// A list of texts (the first [`MAX_TEXTS`]; containers among them dropped),
/// or one string as a list of one.
pub fn texts<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct Visit;
    impl<'de> Visitor<'de> for Visit {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of strings")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Vec<String>, A::Error> {
            let (items, _) = first_of::<Scalar, A>(seq, MAX_TEXTS)?;
            Ok(items.into_iter().filter_map(Scalar::into_text).collect())
        }
        fn visit_str<E>(self, s: &str) -> Result<Vec<String>, E> {
            Ok(vec![s.to_owned()])
        }
        fn visit_string<E>(self, s: String) -> Result<Vec<String>, E> {
            Ok(vec![s])
        }
        fn visit_unit<E>(self) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_none<E>(self) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_u64<E>(self, _: u64) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_i64<E>(self, _: i64) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_f64<E>(self, _: f64) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_bool<E>(self, _: bool) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Vec::new())
        }
    }
    d.deserialize_any(Visit)
}

/// A list read up to a limit: the items kept and how many more were parsed past.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstOf<T> {
    pub items: Vec<T>,
    pub beyond: u64,
}

/// Takes the first `limit` items of a sequence and parses past the rest.
fn first_of<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(
    mut seq: A,
    limit: usize,
) -> Result<(Vec<T>, u64), A::Error> {
    let mut items = Vec::new();
    while items.len() < limit {
        match seq.next_element()? {
            Some(item) => items.push(item),
            None => return Ok((items, 0)),
        }
    }
    let mut beyond = 0u64;
    while seq.next_element::<IgnoredAny>()?.is_some() {
        beyond += 1;
    }
    Ok((items, beyond))
}

/// Reads a list keeping its first `limit` items.
pub fn first<'de, D, T>(d: D, limit: usize) -> Result<FirstOf<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Visit<T>(usize, PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Visit<T> {
        type Value = FirstOf<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<FirstOf<T>, A::Error> {
            let (items, beyond) = first_of(seq, self.0)?;
            Ok(FirstOf { items, beyond })
        }
    }
    d.deserialize_seq(Visit(limit, PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Fields {
        #[serde(default, deserialize_with = "count")]
        n: Option<u64>,
        #[serde(default, deserialize_with = "text")]
        t: Option<String>,
        #[serde(default, deserialize_with = "texts")]
        tags: Vec<String>,
        #[serde(default, deserialize_with = "number")]
        score: Option<f64>,
    }

    fn read(json: &str) -> Fields {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn scalars_of_the_wrong_kind_read_as_absent() {
        let f = read(r#"{"n": -3, "t": {"a": [1, 2]}, "tags": 7, "score": "high"}"#);
        assert_eq!((f.n, f.t, f.tags, f.score), (None, None, vec![], None));
        let f = read(r#"{"n": 1e300, "t": 42, "tags": "one", "score": 0.5}"#);
        assert_eq!(f.n, Some(u64::MAX), "a huge count saturates");
        assert_eq!(f.t.as_deref(), Some("42"));
        assert_eq!(f.tags, ["one"]);
        assert_eq!(f.score, Some(0.5));
        let f =
            read(r#"{"n": 18446744073709551615, "t": true, "tags": ["a", 1, null, ["x"], "b"]}"#);
        assert_eq!(f.n, Some(u64::MAX));
        assert_eq!(f.t.as_deref(), Some("true"));
        assert_eq!(f.tags, ["a", "1", "b"]);
    }

    #[test]
    fn long_lists_keep_their_head_and_count_the_rest() {
        let many = format!("[{}]", vec!["\"t\""; 10_000].join(","));
        let f = read(&format!(r#"{{"tags": {many}}}"#));
        assert_eq!(f.tags.len(), MAX_TEXTS);
        #[derive(Deserialize)]
        struct List {
            #[serde(deserialize_with = "three")]
            items: FirstOf<u32>,
        }
        fn three<'de, D: Deserializer<'de>>(d: D) -> Result<FirstOf<u32>, D::Error> {
            first(d, 3)
        }
        let l: List = serde_json::from_str(r#"{"items": [1, 2, 3, {"x": [4]}, 5]}"#).unwrap();
        assert_eq!(l.items.items, [1, 2, 3]);
        assert_eq!(l.items.beyond, 2);
        let l: List = serde_json::from_str(r#"{"items": [1]}"#).unwrap();
        assert_eq!((l.items.items, l.items.beyond), (vec![1], 0));
    }

    #[test]
    fn deep_containers_where_a_scalar_belongs_are_skipped_without_recursion() {
        let deep = format!("{}{}", "[".repeat(300_000), "]".repeat(300_000));
        let f = serde_json::from_str::<Fields>(&format!(r#"{{"t": {deep}, "n": 5}}"#)).unwrap();
        assert_eq!((f.t, f.n), (None, Some(5)));
    }
}
