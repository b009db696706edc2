//! Live progress for a person watching a terminal: one line per running
//! task (name, turn, tokens, elapsed), redrawn in place, and a final tally.
//!
//! When stderr is not a terminal (journald, a pipe, a file) nothing is drawn
//! and no escape code is written: the plain log lines say the same things.
//! The lines carry no colour, so `NO_COLOR` holds here as in the log.
//! Everything printed — log lines (as a tracing writer), `app`'s messages
//! and what it writes on stdout — goes through [`Progress`]'s
//! [`Printer`], which lifts the live lines, writes redacted, and redraws
//! them.

mod printer;

use printer::Stream;
pub use printer::{Printer, stderr_is_terminal};

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tracing_subscriber::fmt::MakeWriter;

use harness_agent::TaskEvent;
use harness_base::redact::Redactor;

/// A handle on the live display; clones share it. Hidden unless stderr is a terminal.
#[derive(Clone, Default)]
pub struct Progress {
    live: Option<(MultiProgress, ProgressStyle)>,
    redactor: Arc<OnceLock<Redactor>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("live", &self.live.is_some())
            .finish()
    }
}

impl Progress {
    /// Nothing is ever drawn (tests, and stderr that is not a terminal).
    pub fn hidden() -> Progress {
        Progress::default()
    }

    /// Live lines on stderr; the caller has checked that it is a terminal.
    pub fn live() -> Progress {
        let style = ProgressStyle::with_template("{spinner} {prefix:28!} {msg:32} {elapsed:>4}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .tick_chars("|/-\\ ");
        let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4));
        Progress {
            live: Some((bars, style)),
            redactor: Arc::default(),
        }
    }

    /// From now on, every line written here has these secrets replaced.
    pub fn redact_with(&self, redactor: Redactor) {
        let _ = self.redactor.set(redactor);
    }

    /// The printer to stdout: redacted, the live lines lifted around it.
    pub fn stdout(&self) -> Printer {
        self.printer(Stream::Stdout)
    }

    /// The printer to stderr, as [`Progress::stdout`].
    pub fn stderr(&self) -> Printer {
        self.printer(Stream::Stderr)
    }

    fn printer(&self, stream: Stream) -> Printer {
        let live = self.live.as_ref().map(|(bars, _)| bars.clone());
        Printer::new(stream, live, self.redactor.clone())
    }

    /// A diagnostic line on stderr, redacted, with the live lines lifted
    /// and every control character in it escaped (it may quote a server).
    pub fn eprintln(&self, line: &str) {
        let mut w = self.stderr();
        let text: Vec<String> = line
            .split('\n')
            .map(|l| harness_base::text::printable(l).into_owned())
            .collect();
        let _ = w.write_all(format!("{}\n", text.join("\n")).as_bytes());
    }

    /// A live line for a task that has started; it disappears when dropped.
    pub fn task(&self, name: &str) -> TaskProgress {
        let bar = self.live.as_ref().map(|(bars, style)| {
            let bar = bars.add(ProgressBar::new_spinner());
            bar.set_style(style.clone());
            bar.set_prefix(name.to_string());
            bar.set_message(turn_text(0, 0));
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        TaskProgress { bar }
    }

    /// Whether live lines are drawn (stderr is a terminal).
    pub fn is_live(&self) -> bool {
        self.live.is_some()
    }

    /// The run's last line (its tally), printed when the display is live.
    pub fn finish(&self, last_line: &str) {
        if let Some((bars, _)) = &self.live {
            let _ = bars.clear();
            // One write, through the redactor like every other line.
            let _ = self.stderr().write_all(format!("{last_line}\n").as_bytes());
        }
    }
}

/// The live line of one running task.
pub struct TaskProgress {
    bar: Option<ProgressBar>,
}

impl TaskProgress {
    /// Follows the task's events: each reply moves the line on.
    pub fn on(&self, event: &TaskEvent<'_>) {
        if let (Some(bar), TaskEvent::ReplyRead(r)) = (&self.bar, event) {
            bar.set_message(turn_text(r.turn, r.total_tokens));
        }
    }
}

impl Drop for TaskProgress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn turn_text(turn: u32, tokens: u64) -> String {
    if turn == 0 {
        "waiting for the first reply".into()
    } else {
        format!("turn {turn}, {tokens} tokens")
    }
}

/// Log lines go out through the printer to stderr.
impl<'a> MakeWriter<'a> for Progress {
    type Writer = Printer;

    fn make_writer(&'a self) -> Printer {
        self.stderr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reply_moves_a_tasks_line_on_and_its_end_clears_it() {
        let drawn = Progress {
            live: Some((
                MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
                ProgressStyle::default_spinner(),
            )),
            redactor: Arc::default(),
        };
        let task = drawn.task("scan");
        let bar = task
            .bar
            .clone()
            .expect("a live display draws a line per task");
        assert_eq!(
            (bar.prefix(), bar.message()),
            ("scan".into(), "waiting for the first reply".into())
        );
        let reply = |turn, total_tokens| {
            TaskEvent::ReplyRead(harness_agent::ReplyFacts {
                turn,
                usage: harness_wire::chat::Usage::default(),
                total_tokens,
                finish_reason: Some("stop"),
                model: None,
                content: "",
                thinking: None,
                recovered: false,
                calls: &[],
                unread_calls: 0,
                held_back: 0,
            })
        };
        task.on(&reply(1, 160));
        assert_eq!(bar.message(), "turn 1, 160 tokens");
        task.on(&TaskEvent::AskedAgain {
            thinking_off: true,
            note: "go on",
        });
        assert_eq!(bar.message(), "turn 1, 160 tokens", "only replies move it");
        task.on(&reply(2, 420));
        assert_eq!(bar.message(), "turn 2, 420 tokens");
        drop(task);
        assert!(bar.is_finished(), "a task's line goes when the task ends");
    }
}
