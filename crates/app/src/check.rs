//! `check`: the config and every inbox task, read as a run would read
//! them, with nothing run and nothing moved.

use std::io::Write;

use super::exit;
use harness_agent::deps::system_clock;
use harness_config::Config;
use harness_display::Progress;
use harness_drain as drain;
use harness_tools::Toolbox;

pub(super) fn check_command(cfg: &Config, progress: &Progress) -> u8 {
    let offered = Toolbox::offered_by(cfg);
    match drain::check_inbox(cfg, &offered, (system_clock())()) {
        Ok(report) => {
            let mut out = progress.stdout();
            let read = std::path::absolute(&cfg.path).unwrap_or_else(|_| cfg.path.clone());
            let _ = writeln!(
                out,
                "config: {}",
                harness_base::text::printable(&read.display().to_string())
            );
            for line in report
                .config_problems
                .iter()
                .chain(&report.problems)
                .chain(&report.config_warnings)
                .chain(&report.warnings)
                .chain(&report.notes)
                .chain(&report.recurring)
                .chain(&report.budget)
            {
                let _ = writeln!(out, "{}", harness_base::text::printable(line));
            }
            for line in outward(cfg) {
                let _ = writeln!(out, "{line}");
            }
            let config = match (report.config_problems.len(), report.config_warnings.len()) {
                (0, 0) => "config ok".to_string(),
                (0, w) => format!("config ok with {w} warning(s)"),
                (n, _) => format!("{n} config problem(s)"),
            };
            let recurring = match report.recurring.len() {
                0 => String::new(),
                n => format!("; {n} recurring task(s) scheduled"),
            };
            let _ = writeln!(
                out,
                "{}: {config}; {} task file(s), {} with problems, {} with warnings{recurring}",
                cfg.path.display(),
                report.tasks,
                report.problems.len(),
                report.warnings.len()
            );
            if !report.config_problems.is_empty() {
                exit::USAGE
            } else if report.problems.is_empty() {
                exit::OK
            } else {
                exit::FAILED
            }
        }
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e:#}"));
            exit::FAILED
        }
    }
}

/// Where the config sends what leaves the machine, and what TLS trusts
/// there: `[traces]` and `[tls]`, when set.
fn outward(cfg: &Config) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(t) = &cfg.traces {
        lines.push(format!(
            "traces: each task's trace goes to {} (contents {}, {} extra header(s); the end of a run waits at most {} s for them)",
            harness_base::text::printable(&t.shown_endpoint()),
            if t.content {
                "exported, redacted"
            } else {
                "not exported"
            },
            t.headers.len(),
            t.flush.as_secs()
        ));
    }
    if let Some(file) = &cfg.tls.ca_file {
        let webfetch = cfg.webfetch.as_ref().is_some_and(|w| w.use_ca_file);
        lines.push(format!(
            "tls: the bundled roots and {} certificate(s) from {} are trusted ({})",
            cfg.tls.trust.added().len(),
            harness_base::text::printable(&file.display().to_string()),
            if webfetch {
                "webfetch too: use_ca_file"
            } else {
                "webfetch: the bundled roots alone"
            }
        ));
    }
    lines
}
