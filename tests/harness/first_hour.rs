//! The first hour (README, Against your own server): `init` makes a project
//! `check` passes, and never writes over one; the config is found where
//! docs/configuration.md says, in order, and when it is nowhere the error
//! says where it looked and how to make one.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// `agent-harness init <args>` in the scene's folder.
fn init(s: &Scene, args: &[&str]) -> Output {
    bin(s).arg("init").args(args).output().unwrap()
}

/// `agent-harness init <folder> --openai` at a closed port.
fn init_openai(s: &Scene, folder: &str) -> Output {
    init(s, &[folder, "--openai", CLOSED_URL])
}

/// The folder `name` of the scene with a link at `link` inside to `to`.
fn with_link(s: &Scene, name: &str, link: &str, to: &Path) -> PathBuf {
    let folder = s.root().join(name);
    std::fs::create_dir_all(folder.join(link).parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(to, folder.join(link)).unwrap();
    folder
}

/// A file of this repository, as shipped.
fn repo_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// `check` printed that it read `config`.
#[track_caller]
fn assert_checked(out: &Output, config: &Path) {
    assert_contains(stdout(out), &format!("config: {}", config.display()));
}

#[tokio::test]
async fn init_writes_a_project_that_check_passes() {
    let s = scenario().no_config_file().build().await;
    let out = init_openai(&s, "mine");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let dir = s.root().join("mine");
    let config = dir.join("agent.toml");
    let printed = stdout(&out);
    assert_contains(
        &printed,
        &format!("agent-harness --config {} check", config.display()),
    );
    assert_contains(&printed, "run");
    assert_contains(&printed, "show");

    let out = bin(&s).current_dir(&dir).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_checked(&out, &config);
    assert_contains(stdout(&out), "1 task file(s), 0 with problems");
}

#[tokio::test]
async fn init_makes_its_folders_no_wider_than_they_need_and_places_the_example() {
    let s = scenario().no_config_file().build().await;
    let out = init_openai(&s, "mine");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let dir = s.root().join("mine");
    assert_eq!(mode(&dir.join("agent.toml")), 0o640);
    for folder in [
        "tasks/inbox",
        "tasks/done",
        "tasks/failed",
        "tasks/recurring",
    ] {
        assert_eq!(mode(&dir.join(folder)), 0o750, "{folder}");
    }
    assert_eq!(mode(&dir.join("logs")), 0o700);
    // The project folder made is no wider than its task folders.
    assert_eq!(mode(&dir), 0o750);
    let example = std::fs::read_to_string(dir.join("tasks/inbox/example.md")).unwrap();
    assert_eq!(example, repo_file("tasks/inbox/example.md"));
}

#[tokio::test]
async fn init_here_prints_the_commands_without_config_and_never_writes_over_one() {
    let s = scenario().no_config_file().build().await;
    let out = init(&s, &["--openai", CLOSED_URL]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(stdout(&out), "agent-harness check");
    assert_lacks(stdout(&out), "--config");
    let first = std::fs::read(s.config_path()).unwrap();
    let out = init(&s, &["--runpod", "my-endpoint"]);
    assert_eq!(out.status.code(), Some(1));
    assert_contains(
        stderr(&out),
        &format!("{} already exists", s.config_path().display()),
    );
    assert_eq!(std::fs::read(s.config_path()).unwrap(), first, "unchanged");
}

#[tokio::test]
async fn init_for_runpod_says_to_export_the_key_and_checks_clean_with_it() {
    let s = scenario().no_config_file().build().await;
    let out = init(&s, &["rp", "--runpod", "my-endpoint"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(stdout(&out), "RUNPOD_API_KEY");
    let config = std::fs::read_to_string(s.root().join("rp/agent.toml")).unwrap();
    assert_contains(&config, "endpoint_id = \"my-endpoint\"");
    assert_contains(&config, "export RUNPOD_API_KEY");
    let out = bin(&s)
        .current_dir(s.root().join("rp"))
        .env("RUNPOD_API_KEY", "rp-key")
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test]
async fn init_takes_one_endpoint_and_never_a_placeholder_id() {
    let s = scenario().no_config_file().build().await;
    for args in [
        &["x"][..],
        &["x", "--openai", "http://h/v1", "--runpod", "id"],
    ] {
        let out = init(&s, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    // The example's placeholder id, and the README's.
    for id in ["abc123xyz", "ENDPOINT_ID"] {
        let out = init(&s, &["y", "--runpod", id]);
        assert_eq!(out.status.code(), Some(2), "{id}");
        assert_contains(stderr(&out), "placeholder");
        assert!(!s.root().join("y/agent.toml").exists());
    }
}

#[tokio::test]
async fn init_never_adds_the_example_to_a_live_inbox() {
    let s = scenario().no_config_file().build().await;
    // A folder whose inbox already holds someone's queue.
    let live = s.root().join("live");
    std::fs::create_dir_all(live.join("tasks/inbox")).unwrap();
    std::fs::write(live.join("tasks/inbox/weekly.md"), "Do the weekly.").unwrap();
    let out = init_openai(&s, "live");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(
        stdout(&out),
        "holds tasks already: the example task was not placed",
    );
    assert!(!live.join("tasks/inbox/example.md").exists());
}

#[tokio::test]
async fn init_that_cannot_make_the_folders_leaves_no_half_project() {
    let s = scenario().no_config_file().build().await;
    // A folder where the task folders cannot be made: no config stays
    // behind to make the next init refuse.
    let blocked = s.root().join("blocked");
    std::fs::create_dir_all(&blocked).unwrap();
    std::fs::write(blocked.join("tasks"), "a file where a folder goes").unwrap();
    let out = init_openai(&s, "blocked");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(stderr(&out), "cannot create");
    assert_contains(stderr(&out), "was removed again");
    assert!(!blocked.join("agent.toml").exists());
}

#[tokio::test]
async fn init_follows_the_operators_own_tasks_link_and_changes_no_mode_through_it() {
    let s = scenario().no_config_file().build().await;
    let data = tempfile::tempdir().unwrap();
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let project = with_link(&s, "p", "tasks", data.path());

    let out = init_openai(&s, "p");

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(
        stdout(&out),
        &format!(
            "tasks/ is a link to {}: what was missing is made there; its modes are left to you",
            data.path().display()
        ),
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(data.path()), 0o755, "the link's folder keeps its mode");
    assert_eq!(mode(&data.path().join("inbox")), 0o750);
    assert!(data.path().join("inbox/example.md").exists());
    assert_eq!(mode(&project.join("logs")), 0o700);
}

#[tokio::test]
async fn init_follows_no_link_below_tasks() {
    let s = scenario().no_config_file().build().await;
    let data = tempfile::tempdir().unwrap();
    let again = with_link(&s, "q", "tasks/done", data.path());
    let out = init_openai(&s, "q");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(stderr(&out), "done there is a link or no folder");
    assert!(!again.join("agent.toml").exists());
}

#[tokio::test]
#[ignore = "needs scripts/test: root, to give a link to another user"]
async fn init_refuses_a_logs_link_another_user_owns() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test gives a link to another user: run it as root (scripts/test in CI does)"
    );
    let s = scenario().no_config_file().build().await;
    let victim = tempfile::tempdir().unwrap();
    let project = with_link(&s, "p", "logs", victim.path());
    let link = project.join("logs");
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();

    let out = init_openai(&s, "p");

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let said = format!(
        "{} is a link (to {}) that ",
        link.display(),
        victim.path().display()
    );
    assert_contains(&err, &said);
    let theirs = "(uid 65534) owns, not you: init follows no other user's link";
    assert_contains(&err, theirs);
    // No config left behind, nothing made in the link's folder.
    assert!(!project.join("agent.toml").exists());
    assert!(std::fs::read_dir(victim.path()).unwrap().next().is_none());
}

const CONFIG: &str =
    "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n";

/// `dir/agent-harness/agent.toml`, its inbox beside it.
fn user_config(dir: &Path) -> std::path::PathBuf {
    let at = dir.join("agent-harness");
    std::fs::create_dir_all(at.join("tasks/inbox")).unwrap();
    std::fs::write(at.join("agent.toml"), CONFIG).unwrap();
    at.join("agent.toml")
}

/// `check` with the user's config looked for under `home` (no
/// XDG_CONFIG_HOME).
fn check_from_home(s: &Scene, home: &Path) -> Output {
    bin(s)
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", home)
        .arg("check")
        .output()
        .unwrap()
}

#[tokio::test]
async fn without_a_config_here_the_users_is_read_from_xdg_then_home() {
    let s = scenario().no_config_file().build().await;
    let xdg = s.root().join("xdg");
    let found = user_config(&xdg);
    let out = bin(&s)
        .env("XDG_CONFIG_HOME", &xdg)
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_checked(&out, &found);

    let home = s.root().join("home");
    let found = user_config(&home.join(".config"));
    let out = check_from_home(&s, &home);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_checked(&out, &found);

    // One here comes first.
    s.write_config(CLOSED_URL, "");
    assert_checked(&check_from_home(&s, &home), &s.config_path());
}

#[tokio::test]
async fn no_config_anywhere_names_every_place_looked() {
    no_system_config();
    let s = scenario().no_config_file().build().await;
    let home = s.root().join("home");
    let out = check_from_home(&s, &home);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    for place in [
        s.config_path().display().to_string(),
        home.join(".config/agent-harness/agent.toml")
            .display()
            .to_string(),
        "/etc/agent-harness/agent.toml".to_string(),
        "agent-harness init".to_string(),
    ] {
        assert!(err.contains(&place), "{place}: {err}");
    }
}

#[tokio::test]
async fn a_config_the_variable_names_is_never_passed_over() {
    let s = scenario().no_config_file().build().await;
    // The variable naming a missing file is that file's error, though
    // one is found where the lookup would go on.
    let xdg = s.root().join("xdg");
    user_config(&xdg);
    let missing = s.root().join("gone.toml");
    let out = bin(&s)
        .env("XDG_CONFIG_HOME", &xdg)
        .env("AGENT_HARNESS_CONFIG", &missing)
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_contains(stderr(&out), &missing.display().to_string());
    assert_contains(stderr(&out), "cannot read the config file");
}

/// The ```toml blocks of a markdown text, each unindented.
fn toml_blocks(markdown: &str) -> Vec<String> {
    let mut snippets = Vec::new();
    let mut open: Option<String> = None;
    for line in markdown.lines() {
        match (line.trim(), &mut open) {
            ("```toml", None) => open = Some(String::new()),
            ("```", Some(text)) => snippets.push(std::mem::take(text)),
            (_, Some(text)) => {
                text.push_str(line.trim_start());
                text.push('\n');
            }
            _ => {}
        }
        if line.trim() == "```" {
            open = None;
        }
    }
    snippets
}

#[tokio::test]
async fn every_config_snippet_of_the_readme_checks_clean() {
    let snippets = toml_blocks(&repo_file("README.md"));
    assert!(
        !snippets.is_empty(),
        "the README shows the small-model settings"
    );
    for snippet in snippets {
        let s = offline().config(&snippet).build().await;
        let out = bin(&s).arg("check").output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{snippet}\n{}", stdout(&out));
        assert!(
            !stdout(&out).contains("warning:"),
            "{snippet}\n{}",
            stdout(&out)
        );
    }
}
