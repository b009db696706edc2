//! `init [DIR] --openai URL | --runpod ENDPOINT_ID` (docs/operating.md,
//! "Starting a project"): a minimal `agent.toml` that `check` passes, the
//! task folders, the shipped example task in the inbox, and the next three
//! commands. Nothing existing is written over: a config already there is
//! exit 1, naming it.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::exit;
use harness_base::text::shell_word;
use harness_config::{Config, DEFAULT_CONFIG_FILE};
use harness_display::Progress;

/// The repository's example task (`tasks/inbox/example.md`), placed in the
/// new inbox: it needs no tool.
const EXAMPLE_TASK: &str = include_str!("../../../tasks/inbox/example.md");

/// The folders a project holds, created `0750` (`logs` `0700`: the records
/// are private) when missing; one already there is left as it is.
const FOLDERS: [(&str, u32); 5] = [
    ("tasks/inbox", 0o750),
    ("tasks/done", 0o750),
    ("tasks/failed", 0o750),
    ("tasks/recurring", 0o750),
    ("logs", 0o700),
];

/// The config's mode: it names no secret, but says where the service is.
const CONFIG_MODE: u32 = 0o640;

/// Which endpoint the new config speaks to.
pub(super) enum ChosenEndpoint<'a> {
    Openai(&'a str),
    Runpod(&'a str),
}

/// `init`: its exit code.
pub(super) fn init_command(
    dir: Option<&Path>,
    endpoint: &ChosenEndpoint<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    progress: &Progress,
) -> u8 {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let dir = dir.map_or_else(|| cwd.clone(), |d| cwd.join(d));
    let config = dir.join(DEFAULT_CONFIG_FILE);
    if let ChosenEndpoint::Runpod(id) = endpoint
        && [
            harness_config::EXAMPLE_ENDPOINT_ID,
            harness_config::README_ENDPOINT_ID,
        ]
        .contains(&id.trim())
    {
        progress.eprintln("agent-harness: init: --runpod: that is a placeholder endpoint id; give your endpoint's id (RunPod's console, Serverless)");
        return exit::USAGE;
    }
    let text = config_text(endpoint);
    // What is written must load: a URL that is none is refused before any
    // file is made (the key the runpod kind reads may be unset for now).
    let with_key = |k: &str| env(k).or_else(|| (k == "RUNPOD_API_KEY").then(|| "set".into()));
    if let Err(e) = Config::parse(&text, &config, &dir, &with_key) {
        progress.eprintln(&format!("agent-harness: init: {}", e.message));
        return exit::USAGE;
    }
    if let Err(e) = make_folder(&dir, 0o750) {
        progress.eprintln(&format!(
            "agent-harness: init: cannot create {}: {e}",
            dir.display()
        ));
        return exit::FAILED;
    }
    match write_new(&config, text.as_bytes(), CONFIG_MODE) {
        Ok(true) => {}
        Ok(false) => {
            progress.eprintln(&format!(
                "agent-harness: init: {} already exists; init never writes over a config (edit it, or init another folder)",
                config.display()
            ));
            return exit::FAILED;
        }
        Err(e) => {
            progress.eprintln(&format!(
                "agent-harness: init: cannot write {}: {e}",
                config.display()
            ));
            return exit::FAILED;
        }
    }
    let mut out = progress.stdout();
    let _ = writeln!(out, "wrote {}", config.display());
    if let Err(e) = fill(&dir, &mut out) {
        // The config goes with the project it was for: init can be run
        // again once the cause is mended.
        let _ = std::fs::remove_file(&config);
        progress.eprintln(&format!(
            "agent-harness: init: {e}; {} was removed again",
            config.display()
        ));
        return exit::FAILED;
    }
    next_commands(&dir, &cwd, &config, endpoint, &mut out);
    exit::OK
}

/// The folders and the example task, each made only when missing; what
/// was made, said on `out`. A `tasks` or `logs` link of the operator's is
/// followed, and its modes left to them (said); another user's is
/// refused; no link below them is followed, and no mode is changed
/// through one.
fn fill(dir: &Path, out: &mut dyn Write) -> Result<(), String> {
    use harness_base::folder::Folder;
    let root = Folder::open_root(dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    for top in ["tasks", "logs"] {
        let Some(uid) = root.link_owner(top) else {
            continue;
        };
        let link = dir.join(top);
        let to = std::fs::read_link(&link)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "?".into());
        if uid != harness_base::owner::me() && uid != 0 {
            let owner = harness_base::owner::Accounts::read()
                .user(uid)
                .map_or(format!("uid {uid}"), |n| format!("{n} (uid {uid})"));
            return Err(format!(
                "{} is a link (to {to}) that {owner} owns, not you: init follows no other user's link; remove it, or init another folder",
                link.display()
            ));
        }
        let _ = writeln!(
            out,
            "{top}/ is a link to {to}: what was missing is made there; its modes are left to you"
        );
    }
    for (folder, mode) in FOLDERS {
        let path = dir.join(folder);
        make_within(dir, folder, mode)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    }
    let _ = writeln!(
        out,
        "folders: {}",
        FOLDERS.map(|(f, _)| format!("{f}/")).join(", ")
    );
    // An inbox with tasks in it is someone's live queue: the next run
    // would run the example too.
    let inbox = dir.join("tasks/inbox");
    if harness_inbox::list(&inbox).is_ok_and(|tasks| !tasks.is_empty()) {
        let _ = writeln!(
            out,
            "{}/ holds tasks already: the example task was not placed",
            inbox.display()
        );
        return Ok(());
    }
    let example = inbox.join("example.md");
    let placed = write_new(&example, EXAMPLE_TASK.as_bytes(), 0o640)
        .map_err(|e| format!("cannot write {}: {e}", example.display()))?;
    if placed {
        let _ = writeln!(out, "placed the example task: {}", example.display());
    }
    Ok(())
}

/// What to run next: `check`, `run`, `show`, with `--config` when the
/// project is not the current folder.
fn next_commands(
    dir: &Path,
    cwd: &Path,
    config: &Path,
    endpoint: &ChosenEndpoint<'_>,
    out: &mut dyn Write,
) {
    let same = match (std::fs::canonicalize(dir), std::fs::canonicalize(cwd)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    let flag = if same {
        String::new()
    } else {
        format!(" --config {}", shell_word(&config.display().to_string()))
    };
    if let ChosenEndpoint::Runpod(_) = endpoint {
        let _ = writeln!(
            out,
            "export the RunPod key first, typed at a prompt: read -rsp 'RunPod API key: ' RUNPOD_API_KEY && export RUNPOD_API_KEY"
        );
    }
    let _ = writeln!(out, "next:");
    for (command, what) in [
        ("check", "the config and the inbox, calling nothing"),
        ("run", "drain the inbox"),
        ("show", "the newest run: what it did and its answer"),
    ] {
        let _ = writeln!(out, "  agent-harness{flag} {command:<6} # {what}");
    }
}

/// The config `init` writes.
fn config_text(endpoint: &ChosenEndpoint<'_>) -> String {
    let head = "# Written by `agent-harness init`. Every other key has a default: see\n\
                # docs/configuration.md (config/agent.toml.example lists them all).\n\
                # Relative paths resolve against this file's folder; `~/` is your home.\n\n";
    let quoted = |s: &str| serde_json::to_string(s.trim()).unwrap_or_else(|_| "\"\"".into());
    match endpoint {
        ChosenEndpoint::Openai(url) => format!(
            "{head}[endpoint]\nkind = \"openai\"\n\n[openai]\nbase_url = {}\n",
            quoted(url)
        ),
        ChosenEndpoint::Runpod(id) => format!(
            "{head}[endpoint]\nkind = \"runpod\"\n\n[runpod]\nendpoint_id = {}\n\
             # The key is read from this variable: export RUNPOD_API_KEY before\n\
             # `check` and `run`, typed at a prompt so it stays out of the history:\n\
             #   read -rsp 'RunPod API key: ' RUNPOD_API_KEY && export RUNPOD_API_KEY\n\
             api_key_env = \"RUNPOD_API_KEY\"\n",
            quoted(id)
        ),
    }
}

/// Writes `path` only when nothing is there: `Ok(false)` when something is.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<bool> {
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e),
    };
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(true)
}

/// `path` and its missing parents created; the ones made get `mode`,
/// whatever the umask.
fn make_folder(path: &Path, mode: u32) -> std::io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        make_folder(parent, 0o750)?;
    }
    match std::fs::create_dir(path) {
        Ok(()) => std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// `folder` (`tasks/inbox`) within the project `dir`, each missing part
/// made — `0750`, the last `mode` — and given its mode through the opened
/// folder, never by name. The first part may be the operator's link
/// (judged in [`fill`]) and is followed; a link below it is refused.
fn make_within(dir: &Path, folder: &str, mode: u32) -> std::io::Result<()> {
    use harness_base::folder::Folder;
    let parts: Vec<&str> = folder.split('/').collect();
    let mut at = Folder::open_root(dir)?;
    for (i, part) in parts.iter().enumerate() {
        let mode = if i + 1 == parts.len() { mode } else { 0o750 };
        at = if i == 0 && at.link_owner(part).is_some() {
            Folder::open_root(&dir.join(part))?
        } else {
            match at.create_sub(part, mode) {
                Ok(made) => made,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    at.sub(part).map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("{part} there is a link or no folder ({e}); init follows no link below tasks/ and logs/"),
                        )
                    })?
                }
                Err(e) => return Err(e),
            }
        };
    }
    Ok(())
}
