//! A task's run folders read to be resumed from (docs/resume-replay-eval.md,
//! "Resume"). A killed run has no summary and may end in a line cut short, so
//! only whole lines count: a line ends with a newline and parses; the first
//! that does not ends what is read. Everything is read as untrusted input, like
//! [`super::read`]: opened folders, regular files, caps.

use std::path::Path;
use std::time::SystemTime;

use super::capped::{Record, read_record, read_summary_in};
use super::{
    IntentLine, MAX_CONVERSATION_BYTES, MAX_SUMMARY_BYTES, MAX_TOOLS_BYTES, RecordedLine,
    StartLine, Summary, ToolLine,
};
use harness_base::folder::Folder;

/// One run folder of a task, read for a resume.
#[derive(Debug, Clone, Default)]
pub struct PartialRun {
    pub run_id: String,
    /// `None` when the run was killed before it wrote one.
    pub summary: Option<Summary>,
    pub start: Option<StartLine>,
    pub attempts: Vec<RecordedLine>,
    pub tools: Vec<ToolLine>,
    pub intents: Vec<IntentLine>,
    /// When its records were last written: where a killed run's time ends.
    pub last_written: Option<SystemTime>,
}

/// Reads the opened run folder of run `run_id`: its summary and start
/// file only (`attempts`, `tools`, `intents` stay empty until
/// [`read_partial_lines`]), so a folder that is not gone on from costs two
/// small reads. `Err` when its summary or start file is there but
/// unreadable: such a folder is not resumed from.
pub fn read_partial(folder: &Folder, run_id: &str) -> Result<PartialRun, String> {
    let dir = Path::new(run_id);
    let summary = match read_record(folder, "summary.json", MAX_SUMMARY_BYTES) {
        Record::Absent => None,
        _ => Some(read_summary_in(folder, dir)?),
    };
    let start = match read_record(folder, "start.json", MAX_SUMMARY_BYTES) {
        Record::Absent => None,
        Record::Text(text) => {
            Some(serde_json::from_str(&text).map_err(|e| format!("{run_id}/start.json: {e}"))?)
        }
        Record::Refused(why) => return Err(format!("{run_id}: {why}")),
    };
    Ok(PartialRun {
        run_id: run_id.to_string(),
        summary,
        start,
        ..PartialRun::default()
    })
}

/// Reads the whole lines of the opened run folder [`read_partial`] read,
/// and when its records were last written.
pub fn read_partial_lines(folder: &Folder, run: &mut PartialRun) -> Result<(), String> {
    run.last_written = ["run.log", "conversation.jsonl", "tools.jsonl"]
        .iter()
        .filter_map(|f| folder.modified(f))
        .max();
    run.attempts = whole_lines(folder, "conversation.jsonl", MAX_CONVERSATION_BYTES)?;
    run.tools = whole_lines(folder, "tools.jsonl", MAX_TOOLS_BYTES)?;
    run.intents = whole_lines(folder, "intents.jsonl", MAX_TOOLS_BYTES)?;
    Ok(())
}

/// The whole lines of a JSONL record, up to the first that is cut short
/// or does not parse; a file over its cap or not a regular file is an `Err`.
fn whole_lines<T: serde::de::DeserializeOwned>(
    folder: &Folder,
    name: &str,
    cap: u64,
) -> Result<Vec<T>, String> {
    let text = match read_record(folder, name, cap) {
        Record::Text(text) => text,
        Record::Absent => return Ok(Vec::new()),
        Record::Refused(why) => return Err(why),
    };
    Ok(parse_whole_lines(&text))
}

/// The lines of `text` that end with a newline, parsed, up to the first
/// that does not parse.
pub fn parse_whole_lines<T: serde::de::DeserializeOwned>(text: &str) -> Vec<T> {
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole
        .split('\n')
        .filter(|l| !l.trim().is_empty())
        .map_while(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct L {
        n: u32,
    }

    #[test]
    fn a_line_cut_short_or_broken_ends_what_is_read() {
        assert_eq!(
            parse_whole_lines::<L>("{\"n\":1}\n{\"n\":2}\n"),
            [L { n: 1 }, L { n: 2 }]
        );
        assert_eq!(parse_whole_lines::<L>("{\"n\":1}\n{\"n\":2}"), [L { n: 1 }]);
        assert_eq!(
            parse_whole_lines::<L>("{\"n\":1}\n{\"n\"\n{\"n\":3}\n"),
            [L { n: 1 }]
        );
        assert_eq!(parse_whole_lines::<L>("{\"n\":1}"), []);
        assert_eq!(parse_whole_lines::<L>(""), []);
    }

    proptest! {
        /// Whatever the cut, the lines read are a prefix of those written.
        #[test]
        fn any_cut_reads_a_prefix(ns in proptest::collection::vec(0u32..1000, 0..20), cut in 0usize..400) {
            let text: String = ns.iter().map(|n| format!("{{\"n\":{n}}}\n")).collect();
            let cut = cut.min(text.len());
            let read = parse_whole_lines::<L>(&text[..cut]);
            let whole = text[..cut].matches('\n').count();
            prop_assert_eq!(read.len(), whole);
            for (r, n) in read.iter().zip(&ns) {
                prop_assert_eq!(r.n, *n);
            }
        }
    }
}
