//! The six noteworx tools: turning client calls into compact text a small
//! model reads well, and wrapping suggestions in the signature frontmatter.
//!
//! Listings never carry note `content` (the text of many notes is what
//! overflows an 8K context); reads page with `offset`; errors tell the model
//! what to do next. Creating an attachment is idempotent across retried runs:
//! an attachment with the same note, filename and body is not made twice.

pub mod client;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

use super::text::{AFTER_WRITE, Page, page};
use super::{Call, CallContext, ToolOutput};
use crate::noteworx::client::{
    Attachment, ListedAttachment, ListedNote, MAX_LISTED, NewAttachment, Note, NoteworxClient,
    NoteworxError,
};

/// Suggestion bodies larger than this are refused.
pub(crate) const MAX_ATTACHMENT_BYTES: usize = 256 * 1024;

/// The noteworx tools with their client and settings.
#[derive(Debug, Clone)]
pub struct Noteworx {
    pub client: NoteworxClient,
    pub agent_name: String,
    /// The variable holding the token, named when the token is refused.
    pub token_env: String,
}

/// The facts stamped into a suggestion's frontmatter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Signature<'a> {
    pub agent_name: &'a str,
    pub task: &'a str,
    pub run_id: &'a str,
    pub created_at: DateTime<Utc>,
    pub parent_note: &'a str,
}

impl Noteworx {
    pub async fn run(&self, call: &Call, ctx: &CallContext) -> ToolOutput {
        let result = match call {
            Call::Mcp { tool, .. } => {
                return ToolOutput::error(format!("{} is no noteworx tool", tool.name));
            }
            Call::ListNotes { space, tag, limit } => self
                .client
                .list_notes(space.as_deref(), tag.as_deref(), Some(listed(*limit, 20)))
                .await
                .map(|n| ToolOutput::ok(list_notes_text(&n))),
            Call::SearchNotes { query, mode, limit } => self
                .client
                .search_notes(query, mode.as_str(), Some(listed(*limit, 10)))
                .await
                .map(|n| ToolOutput::ok(list_notes_text(&n))),
            Call::ReadNote { slug, offset } => self
                .client
                .read_note(slug)
                .await
                .map(|n| ToolOutput::page(read_note_text(&n, slug, *offset, ctx), false)),
            Call::ListAttachments { slug } => self
                .client
                .list_attachments(slug)
                .await
                .map(|a| ToolOutput::ok(list_attachments_text(slug, &a))),
            Call::ReadAttachment {
                slug,
                attachment_id,
                offset,
            } => {
                return match self.client.read_attachment(slug, attachment_id).await {
                    Ok(a) => read_attachment_text(&a, slug, attachment_id, *offset, ctx),
                    Err(e) => self.explained(e, slug, Some(attachment_id)).await,
                };
            }
            Call::CreateAttachment {
                slug,
                filename,
                content,
            } => return self.create(slug, filename, content, ctx).await,
            Call::Webfetch { .. } => {
                return ToolOutput::error("internal: webfetch routed to noteworx");
            }
        };
        match result {
            Ok(out) => out,
            Err(e) => {
                let slug = match call {
                    Call::ReadNote { slug, .. } | Call::ListAttachments { slug } => {
                        Some(slug.as_str())
                    }
                    _ => None,
                };
                self.explained(e, slug.unwrap_or(""), None).await
            }
        }
    }

    async fn create(
        &self,
        slug: &str,
        filename: &str,
        content: &str,
        ctx: &CallContext,
    ) -> ToolOutput {
        let body = strip_frontmatter(content);
        if body.trim().is_empty() {
            return ToolOutput::error(
                "The attachment content is empty. Write the suggestion text in `content`.",
            );
        }
        if body.len() > MAX_ATTACHMENT_BYTES {
            return ToolOutput::error(format!(
                "The attachment content is {} bytes; the limit is {MAX_ATTACHMENT_BYTES} (256 KiB). Write a shorter suggestion.",
                body.len()
            ));
        }
        let filename = sanitize_filename(filename);
        let signed = sign(
            body,
            &Signature {
                agent_name: ctx.agent.as_deref().unwrap_or(&self.agent_name),
                task: &ctx.task,
                run_id: &ctx.run_id,
                created_at: ctx.now,
                parent_note: slug,
            },
        );
        let request = json!({
            "method": "POST",
            "path": format!("/api/notes/{slug}/attachments"),
            "body": {"filename": filename, "content_type": "text/markdown", "content": signed},
        });
        match self.find_duplicate(slug, &filename, body).await {
            Ok(Some(existing)) => {
                return ToolOutput::ok(format!(
                    "Attachment {filename} with this text already exists on note {slug} (id {}); it was not created again.",
                    existing.id
                ))
                .with_detail(json!({"duplicate_of": existing.id}));
            }
            Ok(None) => {}
            // No title hint for a write: it would steer the write to
            // whichever note holds the title the model wrote.
            Err(e) => return self.explain(e, slug, None),
        }
        // A dry run reads what a live one reads (an attachment already there
        // is a duplicate), finds a missing note the error the write would
        // get, and sends no write.
        if ctx.dry_run {
            if let Err(e) = self.client.read_note(slug).await {
                return self.explain(e, slug, None);
            }
            return ToolOutput::ok(format!(
                // "Treat it as done and continue" made a 1.5B model create it
                // again; said this way it went on.
                "Dry run: the attachment {filename} on note {slug} counts as created (nothing was written). It is done: do not create it again. {AFTER_WRITE}"
            ))
            .with_detail(json!({"dry_run": true, "intent": request}));
        }
        let new = NewAttachment {
            filename: &filename,
            content_type: "text/markdown",
            content: &signed,
        };
        match self.client.create_attachment(slug, &new).await {
            Ok(a) => ToolOutput::ok(format!(
                "Created attachment {} (id {}) on note {slug}. {AFTER_WRITE}",
                or_dash(&a.filename),
                or_dash(&a.id)
            )),
            Err(e) => self.explain(e, slug, None),
        }
    }

    /// An attachment this harness already made on `slug` with the same filename and body.
    async fn find_duplicate(
        &self,
        slug: &str,
        filename: &str,
        body: &str,
    ) -> Result<Option<ListedAttachment>, NoteworxError> {
        for a in self.client.list_attachments(slug).await? {
            if a.filename != filename {
                continue;
            }
            let full = self.client.read_attachment(slug, &a.id).await?;
            if full
                .content
                .as_deref()
                .map(strip_frontmatter)
                .is_some_and(|existing| existing.trim() == body.trim())
            {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }

    /// [`Self::explain`], and for a note that is not there a slug that is
    /// a note's title: the slug of that note. A small model used a note's
    /// title as its slug, though the listing before showed both.
    async fn explained(
        &self,
        e: NoteworxError,
        slug: &str,
        attachment: Option<&str>,
    ) -> ToolOutput {
        let missing_note = matches!(e, NoteworxError::Status { status: 404, .. })
            && attachment.is_none()
            && !slug.is_empty();
        if missing_note && let Some(found) = self.slug_titled(slug).await {
            return ToolOutput::error(format!(
                "No note with slug {slug:?}: that is the title of the note with slug {found:?}. Use that slug."
            ));
        }
        self.explain(e, slug, attachment)
    }

    /// The slug of the one note titled `title` (ASCII case aside), as a
    /// title search finds it; `None` when none or several are. Asked only
    /// of what reads as a title — a space or a capital in it —, not of a
    /// slug spelt wrong.
    async fn slug_titled(&self, title: &str) -> Option<String> {
        let title = title.trim();
        let titled = title.contains(char::is_whitespace) || title.contains(char::is_uppercase);
        if !titled || title.chars().count() > 200 {
            return None;
        }
        let found = self
            .client
            .search_notes(title, "title", Some(5))
            .await
            .ok()?;
        let mut titled = found
            .into_iter()
            .filter(|n| n.title.trim().eq_ignore_ascii_case(title) && !n.slug.is_empty());
        let one = titled.next()?;
        titled
            .next()
            .is_none()
            .then(|| harness_base::text::clip(&one.slug, 200))
    }

    /// Turns a client error into a result that gives the model a next step.
    fn explain(&self, e: NoteworxError, slug: &str, attachment: Option<&str>) -> ToolOutput {
        let text = match &e {
            NoteworxError::Status { status: 404, .. } => match attachment {
                Some(id) => format!(
                    "No attachment with id {id:?} on note {slug:?}. List the note's attachments to get a valid id."
                ),
                None if !slug.is_empty() => {
                    format!(
                        "No note with slug {slug:?}. Search or list notes first and use a slug from the results."
                    )
                }
                None => "noteworx found nothing at that address (404).".to_string(),
            },
            NoteworxError::Status { status, message }
                if harness_config::setup::noteworx_refusal_stops(*status, self.client.token_worked()) =>
            {
                let diagnosis =
                    harness_config::setup::noteworx_diagnosis(&self.token_env, *status, message);
                let mut out = ToolOutput::error(format!(
                    "noteworx refused the token ({status}); the run stops so the operator can fix it."
                ));
                out.setup_fault = Some(diagnosis);
                return out;
            }
            NoteworxError::Status {
                status: 422,
                message,
            } => format!("noteworx rejected the request (422): {message}. Fix the arguments."),
            NoteworxError::Status { status, message } if *status >= 500 => {
                format!(
                    "noteworx is unavailable (HTTP {status}: {message}). Try later or answer without it."
                )
            }
            NoteworxError::Status { status, message } => {
                format!("noteworx refused the request ({status}): {message}.")
            }
            NoteworxError::Unreachable(why) => {
                format!("noteworx is unavailable ({why}). Try later or answer without it.")
            }
            NoteworxError::BadResponse(why) => {
                format!("noteworx sent an unreadable answer ({why}).")
            }
            NoteworxError::TooLarge => {
                "noteworx sent an answer over 32 MiB; it was not read. Try a smaller request (a lower limit) or answer without it.".to_string()
            }
            NoteworxError::BadArgument(why) => format!("{why}. Use a slug or id exactly as a listing gave it."),
        };
        ToolOutput::error(text)
    }
}

/// The model's `limit`, or a default, never above [`MAX_LISTED`].
fn listed(limit: Option<u64>, default: u64) -> u64 {
    limit.unwrap_or(default).min(MAX_LISTED as u64)
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

/// One line per note: slug, title, tags, space, updated date (and score).
pub(crate) fn list_notes_text(notes: &[ListedNote]) -> String {
    if notes.is_empty() {
        return "No notes found.".into();
    }
    let mut out = format!(
        "{} note{}:\n",
        notes.len(),
        if notes.len() == 1 { "" } else { "s" }
    );
    for n in notes {
        out.push_str(&format!("- {} | {}", or_dash(&n.slug), or_dash(&n.title)));
        if !n.tags.is_empty() {
            out.push_str(&format!(" | tags: {}", n.tags.join(", ")));
        }
        if !n.space.is_empty() {
            out.push_str(&format!(" | space: {}", n.space));
        }
        if !n.updated_at.is_empty() {
            out.push_str(&format!(" | updated: {}", n.updated_at));
        }
        if let Some(s) = n.score {
            out.push_str(&format!(" | score: {}", (s * 1000.0).round() / 1000.0));
        }
        out.push('\n');
    }
    out
}

fn read_note_text(n: &Note, slug: &str, offset: usize, ctx: &CallContext) -> Page {
    let mut header = format!(
        "Note {} | {}",
        if n.slug.is_empty() { slug } else { &n.slug },
        or_dash(&n.title)
    );
    if !n.tags.is_empty() {
        header.push_str(&format!(" | tags: {}", n.tags.join(", ")));
    }
    header.push_str("\n\n");
    let content = n.content.as_deref().unwrap_or("");
    if content.is_empty() {
        return Page {
            text: format!("{header}(this note has no text)"),
            read_on: None,
        };
    }
    page(
        &header,
        &ctx.redactor.redact_str(content),
        offset,
        ctx.max_chars,
        &format!("noteworx_read_note with slug={slug:?}"),
    )
}

fn list_attachments_text(slug: &str, attachments: &[ListedAttachment]) -> String {
    if attachments.is_empty() {
        return format!("Note {slug} has no attachments.");
    }
    let mut out = format!("Note {slug} has {} attachment(s):\n", attachments.len());
    for a in attachments {
        out.push_str(&format!(
            "- id {} | {} | {}",
            or_dash(&a.id),
            or_dash(&a.filename),
            or_dash(&a.content_type)
        ));
        if let Some(size) = a.size {
            out.push_str(&format!(" | {size} bytes"));
        }
        if !a.created_at.is_empty() {
            out.push_str(&format!(" | {}", a.created_at));
        }
        out.push('\n');
    }
    out
}

fn read_attachment_text(
    a: &Attachment,
    slug: &str,
    id: &str,
    offset: usize,
    ctx: &CallContext,
) -> ToolOutput {
    let textual = a.content_type.is_empty()
        || a.content_type.starts_with("text/")
        || a.content_type.contains("json")
        || a.content_type.contains("markdown");
    match a.content.as_deref() {
        Some(content) if textual => {
            let header = format!(
                "Attachment {id} | {} | note {slug}\n\n",
                or_dash(&a.filename)
            );
            ToolOutput::page(
                page(
                    &header,
                    &ctx.redactor.redact_str(content),
                    offset,
                    ctx.max_chars,
                    &format!("noteworx_read_attachment with slug={slug:?}, attachment_id={id:?}"),
                ),
                false,
            )
        }
        _ => ToolOutput::error(format!(
            "Attachment {id} on note {slug} is {}, not text; it cannot be read.",
            if a.content_type.is_empty() {
                "not text"
            } else {
                &a.content_type
            }
        )),
    }
}

/// Wraps a suggestion body in the signature frontmatter
/// (docs/tools.md, "noteworx_create_attachment").
pub(crate) fn sign(body: &str, sig: &Signature<'_>) -> String {
    let fields = [
        ("agent", "noteworx-agent-harness".to_string()),
        ("agent_name", sig.agent_name.to_string()),
        ("agent_version", env!("CARGO_PKG_VERSION").to_string()),
        ("agent_task", sig.task.to_string()),
        ("agent_run_id", sig.run_id.to_string()),
        (
            "agent_created_at",
            sig.created_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        ),
        ("parent_note", sig.parent_note.to_string()),
    ];
    let mut out = String::from("---\n");
    for (key, value) in fields {
        out.push_str(&format!("{key}: {}\n", yaml_scalar(&value)));
    }
    out.push_str("---\n");
    out.push_str(body.trim_start_matches(['\n', '\r']));
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// A YAML scalar for `s`: plain when that reads back as the same string,
/// double-quoted (with escapes) otherwise.
pub(crate) fn yaml_scalar(s: &str) -> String {
    const RESERVED: &[&str] = &[
        "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~",
    ];
    let plain_ok = !s.is_empty()
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '+'))
        && !s.ends_with(':')
        && !RESERVED.contains(&s.to_ascii_lowercase().as_str())
        && s.parse::<f64>().is_err()
        && !(s.starts_with("0x")
            || s.starts_with("0o")
            || s.chars()
                .all(|c| c.is_ascii_digit() || c == '_' || c == ':'));
    if plain_ok {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20
                || c == '\u{7f}'
                || c == '\u{85}'
                || c == '\u{2028}'
                || c == '\u{2029}' =>
            {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Removes frontmatter the model wrote itself (`---` YAML or `+++` TOML at the top).
pub(crate) fn strip_frontmatter(content: &str) -> &str {
    let trimmed = content.trim_start_matches(['\n', '\r', ' ', '\u{feff}']);
    for fence in ["---", "+++"] {
        let Some(first) = trimmed.split_inclusive('\n').next() else {
            continue;
        };
        if first.trim_end() != fence {
            continue;
        }
        let mut offset = first.len();
        for line in trimmed[first.len()..].split_inclusive('\n') {
            offset += line.len();
            let l = line.trim_end();
            if l == fence || (fence == "---" && l == "...") {
                return &trimmed[offset..];
            }
        }
    }
    content
}

/// A safe attachment file name: no path separators or control characters,
/// no leading dot, `.md` added when there is no extension.
pub(crate) fn sanitize_filename(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c == '/' || c == '\\' || c.is_control() || c == ':' {
                '-'
            } else {
                c
            }
        })
        .collect::<String>()
        .trim()
        .trim_start_matches(['.', '-', ' '])
        .to_string();
    if s.chars().count() > 100 {
        s = s.chars().take(100).collect();
    }
    if s.is_empty() {
        s = "suggestion".into();
    }
    let has_extension = s.rfind('.').is_some_and(|i| i > 0 && i + 1 < s.len());
    if !has_extension {
        s = s.trim_end_matches('.').to_string();
        s.push_str(".md");
    }
    s
}

#[cfg(test)]
mod tests;
