//! `completions SHELL` and the hidden `man`: a shell completion script
//! and the man page, both made from the command line's clap definitions
//! when the command runs (nothing of them is built for any other command).

use std::io::Write;

use clap::CommandFactory;

use super::cli::{Cli, Command, Shell};
use super::exit;
use harness_display::Progress;

/// Prints the completion script or the man page on stdout.
pub(super) fn print(command: &Command, progress: &Progress) -> u8 {
    let mut cli = Cli::command();
    let mut text = Vec::new();
    let written = match command {
        Command::Completions { shell } => {
            let name = cli.get_name().to_string();
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            clap_complete::generate(shell, &mut cli, name, &mut text);
            Ok(())
        }
        _ => clap_mangen::Man::new(cli)
            .render(&mut text)
            .map(|()| text = title_first(&text)),
    };
    let mut out = progress.stdout();
    let written = written
        .and_then(|()| out.write_all(&text))
        .and_then(|()| out.flush());
    exit::of_listing(written, true, progress)
}

/// The page with its `.TH` line first (clap_mangen puts the definitions
/// of its quote string before it; they hold anywhere before their use).
fn title_first(page: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(page);
    let (title, rest): (Vec<&str>, Vec<&str>) = text
        .split_inclusive('\n')
        .partition(|line| line.starts_with(".TH "));
    title
        .into_iter()
        .chain(rest)
        .collect::<String>()
        .into_bytes()
}
