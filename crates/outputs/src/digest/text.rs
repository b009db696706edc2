//! The digest as a person reads it (docs/operating.md, "Digest and mail"):
//! the mail's subject, counting what it holds, and the plain text — one line
//! when there is nothing to report, else the sending run's end, the folders
//! not read, the failures, the answers, the changes, what was folded, and
//! the spend.

use chrono::{DateTime, Utc};

use super::{Changed, Digest};

impl Digest {
    /// The mail's subject: what the digest holds, counted.
    pub fn subject(&self) -> String {
        if self.is_empty() {
            return "agent-harness digest: nothing happened".into();
        }
        let mut parts = Vec::new();
        if let Some(run) = self.sent_by.as_ref().filter(|r| r.exit_code != 0) {
            parts.push(format!("this run exited {}", run.exit_code));
        }
        let unread = self.unread.len() + self.more_unread;
        if unread > 0 {
            parts.push(format!("{unread} folder(s) not read"));
        }
        let failed = self.failures.len() + self.more_failures;
        if failed > 0 {
            parts.push(format!("{failed} failed"));
        }
        if self.earlier_failures > 0 {
            parts.push(format!("{} failed alike before", self.earlier_failures));
        }
        let answered = self.answers.len() + self.more_answers;
        if answered > 0 {
            parts.push(format!("{answered} answered"));
        }
        let changed = self.changes.len() + self.more_changes;
        if changed > 0 {
            parts.push(format!("{changed} changed"));
        }
        if self.unchanged > 0 {
            parts.push(format!("{} unchanged", self.unchanged));
        }
        format!("agent-harness digest: {}", parts.join(", "))
    }

    /// The digest as plain text: one line when there is nothing to report.
    pub fn text(&self) -> String {
        if self.is_empty() {
            let sender = match &self.sent_by {
                Some(run) => format!("; the run sending it exited {}", run.exit_code),
                None => String::new(),
            };
            return format!(
                "agent-harness digest: nothing happened since {} ({}){sender}.\n",
                self.when(self.since),
                self.timezone
            );
        }
        let mut out = vec![format!(
            "agent-harness digest: {} to {} ({})",
            self.when(self.since),
            self.when(self.until),
            self.timezone
        )];
        self.sender_lines(&mut out);
        self.unread_lines(&mut out);
        self.failure_lines(&mut out);
        self.answer_lines(&mut out);
        self.change_lines(&mut out);
        self.folded_lines(&mut out);
        out.push(String::new());
        out.push(self.spend.line(&self.timezone));
        out.join("\n") + "\n"
    }

    /// `t` in the digest's zone, to the minute.
    fn when(&self, t: DateTime<Utc>) -> String {
        t.with_timezone(&self.zone)
            .format("%Y-%m-%d %H:%M")
            .to_string()
    }

    /// How the run that mails it ended, and what it said.
    fn sender_lines(&self, out: &mut Vec<String>) {
        let Some(run) = &self.sent_by else {
            return;
        };
        out.push(String::new());
        out.push(format!(
            "This run, which sends the digest, exited {}{}",
            run.exit_code,
            if run.said.is_empty() { "." } else { ":" }
        ));
        out.extend(run.said.iter().map(|l| format!("  {l}")));
    }

    fn unread_lines(&self, out: &mut Vec<String>) {
        if self.unread.is_empty() {
            return;
        }
        out.push(String::new());
        out.push(format!(
            "Not read ({}), so their runs are missing here:",
            self.unread.len() + self.more_unread
        ));
        out.extend(self.unread.iter().map(|l| format!("- {l}")));
        more(out, self.more_unread);
    }

    fn failure_lines(&self, out: &mut Vec<String>) {
        if self.failures.is_empty() {
            return;
        }
        out.push(String::new());
        out.push(format!(
            "Failed ({}):",
            self.failures.len() + self.more_failures
        ));
        for f in &self.failures {
            out.push(format!(
                "- {}: {} ({}), run {}",
                f.task,
                f.status.as_str(),
                f.stop_reason,
                f.run_id
            ));
            if let Some(e) = &f.error {
                out.push(format!("  {e}"));
            }
            out.push(format!("  run it again: {}", f.run_again));
        }
        more(out, self.more_failures);
    }

    fn answer_lines(&self, out: &mut Vec<String>) {
        if self.answers.is_empty() {
            return;
        }
        out.push(String::new());
        out.push(format!(
            "Answers ({}):",
            self.answers.len() + self.more_answers
        ));
        for a in &self.answers {
            out.push(format!("- {}: {}", a.task, a.first_line));
        }
        more(out, self.more_answers);
    }

    fn change_lines(&self, out: &mut Vec<String>) {
        if self.changes.is_empty() {
            return;
        }
        out.push(String::new());
        out.push(format!(
            "Changed ({}):",
            self.changes.len() + self.more_changes
        ));
        for c in &self.changes {
            out.push(format!(
                "- {}: {}",
                c.task,
                match c.change {
                    Changed::Fixed => "fixed (it failed last time)",
                    Changed::Broken => "broken (it succeeded last time)",
                }
            ));
        }
        more(out, self.more_changes);
    }

    /// The counts of what was folded: runs as their previous run, and
    /// earlier failures alike a failure named above.
    fn folded_lines(&self, out: &mut Vec<String>) {
        if self.unchanged == 0 && self.earlier_failures == 0 {
            return;
        }
        out.push(String::new());
        if self.unchanged > 0 {
            out.push(format!(
                "Unchanged: {} run(s) ended as their task's previous run did.",
                self.unchanged
            ));
        }
        if self.earlier_failures > 0 {
            out.push(format!(
                "Failed alike before: {} earlier failure(s) of the same kind as their task's failure named above.",
                self.earlier_failures
            ));
        }
    }
}

fn more(out: &mut Vec<String>, n: usize) {
    if n > 0 {
        out.push(format!("- and {n} more"));
    }
}
