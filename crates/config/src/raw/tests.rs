//! Unit tests of the raw types: docs/configuration.md names every key the
//! reader accepts, once, and no other. The reader's keys come from the raw
//! types themselves: a recording deserializer walks [`RawConfig`] and notes
//! each field name serde asks for (`deserialize_struct` receives the
//! struct's field list, renames applied), so a key added to, renamed in or
//! dropped from a raw type changes the set with no list to keep by hand.
//!
//! Paths read as the document writes them: a table whose keys are names a
//! person chooses (`[agents.NAME]`, `[mcp.servers.NAME]`) is `NAME`; the
//! keys of a table passed on untouched (`[model.extra]`) are `*`; the keys
//! the reader fills such a table with by default
//! (`[model.chat_template_kwargs] enable_thinking`) are named too.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::de::value::{Error, StrDeserializer};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};

use super::RawConfig;

const DOCUMENT: &str = include_str!("../../../../docs/configuration.md");
const DOCUMENT_NAME: &str = "docs/configuration.md";

/// The header every key table of the document has.
const HEADER: &str = "| key | default | bounds | what it sets |";
const SEPARATOR: &str = "|---|---|---|---|";

/// One step of a key's path: a field of a struct, or the entry of a map
/// keyed by a name the person chooses.
#[derive(Clone, Copy)]
enum Step {
    Field(&'static str),
    Entry,
}

/// What the walk of the raw types found: keys, and what it could not walk.
#[derive(Default)]
struct Found {
    keys: RefCell<Vec<String>>,
    problems: RefCell<Vec<String>>,
}

/// A deserializer that hands every struct all of its fields and notes each
/// leaf it reaches as `[table] key`.
struct Recorder<'a> {
    found: &'a Found,
    path: Vec<Step>,
    /// Inside an array: its items are not keys.
    in_array: bool,
}

impl<'a> Recorder<'a> {
    fn child(&self, step: Step) -> Recorder<'a> {
        let mut path = self.path.clone();
        path.push(step);
        Recorder {
            found: self.found,
            path,
            in_array: self.in_array,
        }
    }

    /// `[a.b] c` for the path a, b, c; `NAME` for a map entry in a table's
    /// place, `*` in a key's.
    fn written(&self) -> String {
        let name = |step: &Step, entry: &'static str| match step {
            Step::Field(f) => *f,
            Step::Entry => entry,
        };
        match self.path.split_last() {
            Some((key, tables)) if !tables.is_empty() => {
                let table: Vec<&str> = tables.iter().map(|s| name(s, "NAME")).collect();
                format!("[{}] {}", table.join("."), name(key, "*"))
            }
            _ => format!(
                "(top level) {}",
                self.path.first().map_or("", |s| name(s, "*"))
            ),
        }
    }

    fn leaf(&self) {
        if !self.in_array {
            self.found.keys.borrow_mut().push(self.written());
        }
    }

    /// A struct or a map inside an array (an array of tables) is not walked.
    fn refuse_in_array(&self) -> Result<(), Error> {
        if self.in_array {
            let problem = format!(
                "{}: an array of tables; teach {} to walk it",
                self.written(),
                file!()
            );
            self.found.problems.borrow_mut().push(problem.clone());
            return Err(de::Error::custom(problem));
        }
        Ok(())
    }
}

macro_rules! leaf {
    ($($method:ident => $visit:ident($($value:expr)?);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                self.leaf();
                visitor.$visit($($value)?)
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for Recorder<'_> {
    type Error = Error;

    leaf! {
        deserialize_any => visit_bool(false);
        deserialize_bool => visit_bool(false);
        deserialize_i8 => visit_i64(0);
        deserialize_i16 => visit_i64(0);
        deserialize_i32 => visit_i64(0);
        deserialize_i64 => visit_i64(0);
        deserialize_u8 => visit_u64(0);
        deserialize_u16 => visit_u64(0);
        deserialize_u32 => visit_u64(0);
        deserialize_u64 => visit_u64(0);
        deserialize_f32 => visit_f64(0.0);
        deserialize_f64 => visit_f64(0.0);
        deserialize_char => visit_char('a');
        deserialize_str => visit_str("");
        deserialize_string => visit_str("");
        deserialize_bytes => visit_bytes(&[]);
        deserialize_byte_buf => visit_bytes(&[]);
        deserialize_unit => visit_unit();
        deserialize_identifier => visit_str("");
        deserialize_ignored_any => visit_unit();
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.leaf();
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.leaf();
        visitor.visit_seq(OneItem {
            item: Some(Recorder {
                found: self.found,
                path: self.path.clone(),
                in_array: true,
            }),
        })
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.refuse_in_array()?;
        visitor.visit_map(Entries {
            names: &["NAME"],
            step: |_| Step::Entry,
            parent: self,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.refuse_in_array()?;
        visitor.visit_map(Entries {
            names: fields,
            step: Step::Field,
            parent: self,
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.leaf();
        let first = variants
            .first()
            .ok_or_else(|| de::Error::custom(format!("{name} has no variant")))?;
        let variant: StrDeserializer<'_, Error> = (*first).into_deserializer();
        visitor.visit_enum(variant)
    }
}

/// A map or a struct: each of `names` once, its value a recorder one step
/// further down.
struct Entries<'a> {
    names: &'static [&'static str],
    step: fn(&'static str) -> Step,
    parent: Recorder<'a>,
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.names.first() {
            Some(name) => {
                let key: StrDeserializer<'_, Error> = (*name).into_deserializer();
                seed.deserialize(key).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let (name, rest) = self
            .names
            .split_first()
            .ok_or_else(|| de::Error::custom("a value asked for before its key"))?;
        self.names = rest;
        seed.deserialize(self.parent.child((self.step)(name)))
    }
}

/// An array of one item, walked so the item's type is checked, never noted.
struct OneItem<'a> {
    item: Option<Recorder<'a>>,
}

impl<'de> SeqAccess<'de> for OneItem<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.item
            .take()
            .map(|item| seed.deserialize(item))
            .transpose()
    }
}

/// Every key the reader accepts, `[table] key`, as often as it is found.
fn reader_keys() -> Vec<String> {
    let found = Found::default();
    let recorder = Recorder {
        found: &found,
        path: Vec::new(),
        in_array: false,
    };
    let walked = RawConfig::deserialize(recorder);
    let problems = found.problems.take();
    assert!(
        problems.is_empty() && walked.is_ok(),
        "the walk of RawConfig failed ({:?}): {problems:#?}",
        walked.err().map(|e| e.to_string())
    );
    let mut keys = found.keys.take();
    keys.extend(keys_filled_by_default(&keys));
    keys
}

/// The keys the reader puts in its free-form tables (`[t] *`) by default:
/// the document names them. Each free-form table is listed here; the
/// assertion says when a new one is not.
fn keys_filled_by_default(keys: &[String]) -> Vec<String> {
    let model = RawConfig::default().model;
    let tables = [
        ("model.chat_template_kwargs", &model.chat_template_kwargs),
        ("model.extra", &model.extra),
    ];
    let listed: BTreeSet<String> = tables.iter().map(|(t, _)| format!("[{t}] *")).collect();
    let free: BTreeSet<String> = keys
        .iter()
        .filter(|k| k.ends_with("] *"))
        .cloned()
        .collect();
    assert_eq!(
        free, listed,
        "the reader's free-form tables: list each one's default in keys_filled_by_default"
    );
    tables
        .iter()
        .flat_map(|(table, defaults)| defaults.keys().map(move |k| format!("[{table}] {k}")))
        .collect()
}

/// The keys a document's tables name, with their line, and its malformed
/// lines. A key table sits under a `## `[table]`` heading, has [`HEADER`]
/// and [`SEPARATOR`], then one row per key, whose first cell is
/// `` `[table] key` `` for that heading's table, and whose default and
/// "what it sets" cells are not empty.
fn document_keys(text: &str) -> (Vec<(usize, String)>, Vec<String>) {
    let mut keys = Vec::new();
    let mut problems = Vec::new();
    let mut section: Option<(usize, String)> = None;
    let mut rows_in_section = 0;
    // 0: outside a table, 1: after its header, 2: in its rows.
    let mut table_state = 0;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.starts_with('#') {
            no_rows(&section, rows_in_section, &mut problems);
            rows_in_section = 0;
            section = section_heading(line, n, &mut problems).map(|t| (n, t));
        }
        if !line.starts_with('|') {
            if table_state == 1 {
                problems.push(format!(
                    "line {n}: a table header with no `{SEPARATOR}` under it"
                ));
            }
            table_state = 0;
            continue;
        }
        match (table_state, &section) {
            (_, None) => problems.push(format!(
                "line {n}: a table outside a `## `[table]`` section"
            )),
            (0, _) if line == HEADER => table_state = 1,
            (0, _) => problems.push(format!("line {n}: a table whose header is not `{HEADER}`")),
            (1, _) if line == SEPARATOR => table_state = 2,
            (1, _) => problems.push(format!("line {n}: `{SEPARATOR}` expected under the header")),
            (_, Some((_, table))) => match row_key(line, table) {
                Ok(key) => {
                    rows_in_section += 1;
                    keys.push((n, key));
                }
                Err(why) => problems.push(format!("line {n}: {why}: {line}")),
            },
        }
    }
    no_rows(&section, rows_in_section, &mut problems);
    (keys, problems)
}

/// A section with no key rows is a problem.
fn no_rows(section: &Option<(usize, String)>, rows: usize, problems: &mut Vec<String>) {
    if let Some((line, table)) = section
        && rows == 0
    {
        problems.push(format!("line {line}: section `[{table}]` has no key rows"));
    }
}

/// The table a `## `[table]`` heading opens; `None` for another heading (a
/// `##` heading that is not a table is a problem).
fn section_heading(line: &str, n: usize, problems: &mut Vec<String>) -> Option<String> {
    let rest = line.strip_prefix("## ")?;
    let table = rest
        .strip_prefix("`[")
        .and_then(|r| r.strip_suffix("]`"))
        .filter(|t| is_table(t));
    if table.is_none() {
        problems.push(format!(
            "line {n}: a `##` heading that is not `## `[table]``: {line}"
        ));
    }
    table.map(str::to_string)
}

/// The key a row names, `[table] key`, checked against its section's table.
fn row_key(line: &str, section: &str) -> Result<String, String> {
    let inner = line
        .strip_prefix('|')
        .and_then(|l| l.strip_suffix('|'))
        .ok_or("a row must start and end with `|`")?;
    let cells: Vec<&str> = split_cells(inner).into_iter().map(str::trim).collect();
    let &[key, default, _bounds, what] = cells.as_slice() else {
        return Err(format!("{} cells, not 4", cells.len()));
    };
    let written = key
        .strip_prefix("`[")
        .and_then(|k| k.strip_suffix('`'))
        .and_then(|k| k.split_once("] "))
        .ok_or("the first cell is not `[table] key`")?;
    let (table, name) = written;
    if !is_table(table) || !is_key(name) {
        return Err(format!("`[{table}] {name}` is not a table and a key"));
    }
    if table != section {
        return Err(format!(
            "`[{table}] {name}` under the section `[{section}]`"
        ));
    }
    if default.is_empty() || what.is_empty() {
        return Err("an empty default or \"what it sets\"".to_string());
    }
    Ok(format!("[{table}] {name}"))
}

/// The cells between a row's outer `|`s, split at each `|` not escaped.
fn split_cells(inner: &str) -> Vec<&str> {
    let mut cells = Vec::new();
    let mut start = 0;
    let bytes = inner.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'|' && (i == 0 || bytes[i - 1] != b'\\') {
            cells.push(&inner[start..i]);
            start = i + 1;
        }
    }
    cells.push(&inner[start..]);
    cells
}

fn is_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `a.b.NAME`: names, or `NAME` for one a person chooses.
fn is_table(s: &str) -> bool {
    s.split('.').all(|part| part == "NAME" || is_name(part))
}

fn is_key(s: &str) -> bool {
    s == "*" || is_name(s)
}

/// Each key with the lines that name it, where more than one does.
fn repeated(keys: &[(usize, String)]) -> BTreeMap<&str, Vec<usize>> {
    let mut lines: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (n, key) in keys {
        lines.entry(key.as_str()).or_default().push(*n);
    }
    lines.retain(|_, l| l.len() > 1);
    lines
}

/// One key a line, or ` none`.
fn listed(keys: Vec<&String>) -> String {
    if keys.is_empty() {
        return " none".to_string();
    }
    keys.into_iter().map(|k| format!("\n    {k}")).collect()
}

#[test]
fn the_walk_finds_keys_of_every_kind_of_table() {
    let keys = reader_keys();
    for key in [
        "[endpoint] kind",
        "[limits] max_turns",
        "[tools.webfetch] allow_hosts",
        "[agents.NAME] role_prompt",
        "[mcp.servers.NAME] command",
        "[model.extra] *",
        "[model.chat_template_kwargs] *",
        "[model.chat_template_kwargs] enable_thinking",
    ] {
        assert!(keys.iter().any(|k| k == key), "{key} not in {keys:#?}");
    }
    let unique: BTreeSet<&String> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "a key found twice: {keys:#?}");
}

#[test]
fn configuration_md_is_well_formed_and_names_each_key_once() {
    let (keys, problems) = document_keys(DOCUMENT);
    assert!(
        problems.is_empty(),
        "{DOCUMENT_NAME} has malformed lines:\n  {}",
        problems.join("\n  ")
    );
    let repeated = repeated(&keys);
    assert!(
        repeated.is_empty(),
        "{DOCUMENT_NAME} names a key more than once (key: lines): {repeated:?}"
    );
}

#[test]
fn configuration_md_names_the_keys_the_reader_accepts_and_no_other() {
    let reader: BTreeSet<String> = reader_keys().into_iter().collect();
    let (keys, _) = document_keys(DOCUMENT);
    let document: BTreeSet<String> = keys.into_iter().map(|(_, k)| k).collect();
    let undocumented: Vec<&String> = reader.difference(&document).collect();
    let unknown: Vec<&String> = document.difference(&reader).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "{DOCUMENT_NAME} and the config reader (crates/config/src/raw.rs and the types it \
         holds) disagree.\n  Read by the reader, missing from {DOCUMENT_NAME} (add a row with \
         its default and bounds):{}\n  In {DOCUMENT_NAME}, unknown to the reader (a key the \
         reader refuses):{}",
        listed(undocumented),
        listed(unknown),
    );
}

#[test]
fn the_document_reader_refuses_malformed_tables() {
    let ok = "## `[limits]`\n\n| key | default | bounds | what it sets |\n|---|---|---|---|\n";
    let good = format!("{ok}| `[limits] max_turns` | 8 | 1–1000 | model calls |\n");
    let (keys, problems) = document_keys(&good);
    assert_eq!(keys, [(5, "[limits] max_turns".to_string())]);
    assert!(problems.is_empty(), "{problems:?}");
    for (bad, why) in [
        (
            "| limits max_turns | 8 | 1–1000 | calls |",
            "is not `[table] key`",
        ),
        (
            "| `[limits]max_turns` | 8 | 1–1000 | calls |",
            "is not `[table] key`",
        ),
        (
            "| `[limits] Max-Turns` | 8 | 1–1000 | calls |",
            "not a table and a key",
        ),
        (
            "| `[model] top_k` | 64 | ≥ 0 | top-k |",
            "under the section `[limits]`",
        ),
        ("| `[limits] max_turns` | 8 | calls |", "3 cells, not 4"),
        (
            "| `[limits] max_turns` | | 1–1000 | calls |",
            "an empty default",
        ),
        (
            "| `[limits] max_turns` | 8 | 1–1000 | calls",
            "start and end with `|`",
        ),
    ] {
        let (keys, problems) = document_keys(&format!("{ok}{bad}\n"));
        assert!(
            keys.is_empty() && problems.iter().any(|p| p.contains(why)),
            "{bad:?}: {keys:?} {problems:?}"
        );
    }
    for (bad, why) in [
        ("## `[limits]`\n\nNo table.\n", "has no key rows"),
        ("## Limits\n", "not `## `[table]``"),
        (
            "| `[limits] max_turns` | 8 | 1–1000 | calls |\n",
            "outside a `## `[table]``",
        ),
        (
            "## `[limits]`\n| key | default | what it sets |\n",
            "header is not",
        ),
        (
            "## `[limits]`\n| key | default | bounds | what it sets |\nx\n",
            "no `|---|",
        ),
    ] {
        let (_, problems) = document_keys(bad);
        assert!(
            problems.iter().any(|p| p.contains(why)),
            "{bad:?}: {problems:?}"
        );
    }
    let twice = format!("{good}| `[limits] max_turns` | 8 | 1–1000 | calls |\n");
    let (keys, _) = document_keys(&twice);
    assert_eq!(repeated(&keys).get("[limits] max_turns"), Some(&vec![5, 6]));
}
