//! One record file of an opened run folder, read as untrusted input
//! (docs/untrusted-input.md): a regular file, no link followed, at most
//! its cap.

use std::io;
use std::path::Path;

use super::Summary;
use harness_base::file::FileError;
use harness_base::folder::Folder;

/// `summary.json` is read up to this size.
pub const MAX_SUMMARY_BYTES: u64 = 1 << 20;
/// `conversation.jsonl`: every request and response of a run.
pub const MAX_CONVERSATION_BYTES: u64 = 64 << 20;
/// `tools.jsonl`: every call's arguments and result.
pub const MAX_TOOLS_BYTES: u64 = 32 << 20;

/// How a record file was found.
pub(super) enum Record {
    Absent,
    Text(String),
    /// Not loaded: why, in one line.
    Refused(String),
}

/// A record file of an opened run folder: a regular file (no link
/// followed), at most `cap` bytes.
pub(super) fn read_record(folder: &Folder, name: &str, cap: u64) -> Record {
    match folder.read(name, cap) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Record::Text(text),
            Err(_) => Record::Refused(format!("{name} is not UTF-8: not loaded")),
        },
        Err(FileError::Io(e)) if e.kind() == io::ErrorKind::NotFound => Record::Absent,
        Err(FileError::TooLarge { len, cap }) => Record::Refused(format!(
            "{name} is {len} bytes, over its cap of {cap}: not loaded"
        )),
        Err(e) => Record::Refused(format!("{name}: {e}")),
    }
}

/// Reads `summary.json` of an opened run folder (`dir` names it in messages).
pub(super) fn read_summary_in(folder: &Folder, dir: &Path) -> Result<Summary, String> {
    match read_record(folder, "summary.json", MAX_SUMMARY_BYTES) {
        Record::Text(text) => {
            serde_json::from_str(&text).map_err(|e| format!("{}/summary.json: {e}", dir.display()))
        }
        Record::Absent => Err(format!("{}/summary.json is missing", dir.display())),
        Record::Refused(why) => Err(format!("{}: {why}", dir.display())),
    }
}
