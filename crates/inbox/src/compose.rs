//! A task given on the command line (`exec`), with keys the flags set
//! (`--agent`, `--tools`) written into its frontmatter, so the task file
//! recorded as `task.md` is the task that ran.

use super::{TaskProblem, parse_task};

/// `text` with `keys` set in its `+++` frontmatter (made when it has none),
/// over what it said; then read as any task file is.
pub fn with_keys(text: &str, keys: &[(&str, toml::Value)]) -> Result<String, TaskProblem> {
    parse_task(text)?;
    if keys.is_empty() {
        return Ok(text.to_string());
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let is_fence = |l: &str| l.trim_end_matches(['\n', '\r']) == "+++";
    let mut lines = text.split_inclusive('\n');
    let (mut table, body) = match lines.next() {
        Some(first) if is_fence(first) => {
            let start = first.len();
            let mut end = start;
            for line in lines.by_ref() {
                if is_fence(line) {
                    break;
                }
                end += line.len();
            }
            let close = text[end..].split_inclusive('\n').next().map_or(0, str::len);
            let table: toml::Table = toml::from_str(&text[start..end])
                .map_err(|e| TaskProblem::new(None, format!("frontmatter: {}", e.message())))?;
            (table, &text[end + close..])
        }
        _ => (toml::Table::new(), text),
    };
    for (key, value) in keys {
        table.insert((*key).to_string(), value.clone());
    }
    let frontmatter =
        toml::to_string(&table).map_err(|e| TaskProblem::new(None, format!("frontmatter: {e}")))?;
    let composed = format!("+++\n{frontmatter}+++\n{body}");
    parse_task(&composed)?;
    Ok(composed)
}
