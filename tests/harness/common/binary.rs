//! The binary as a person runs it: in the project's folder, no config
//! from the environment, no colour.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_harness::config::Config;

use super::{Project, fake_noteworx};

/// `agent-harness` in `project`, as assert_cmd runs it: killed (and the
/// test failed) after 120 s, so a hang never hangs the suite.
pub fn bin(project: &Project) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("agent-harness").unwrap();
    cmd.current_dir(project.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        // No user's config is found in place of a missing one.
        .env("XDG_CONFIG_HOME", project.root().join(".no-user-config"))
        .env("NO_COLOR", "1")
        .timeout(Duration::from_secs(120));
    cmd
}

/// `args` run by the binary in `project` off the test's runtime, so the
/// fakes it calls keep answering.
pub async fn run_bin(project: &Project, args: &[&str]) -> std::process::Output {
    let mut cmd = bin(project);
    cmd.args(args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// `agent-harness run` in `project` with the fake notes service's token,
/// in the background; its stdout dropped, its stderr where `stderr` says.
pub fn spawn_run(project: &Project, stderr: Stdio) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("agent-harness"))
        .arg("run")
        .current_dir(project.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .env("NO_COLOR", "1")
        .env("NOTEWORX_TOKEN", fake_noteworx::TOKEN)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// `stderr.log` in `project`, appended to: where a background run's
/// stderr goes when the test reads it after.
pub fn stderr_to_log(project: &Project) -> Stdio {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(project.root().join("stderr.log"))
        .unwrap()
        .into()
}

/// `replay` of the run folder `dir` (from `from_turn`, read-only): its
/// exit code and what it printed.
pub async fn replay_of(cfg: &Config, dir: &Path, from_turn: Option<u32>) -> (u8, String) {
    let mut out = Vec::new();
    let opts = agent_harness::lab::replay::ReplayOptions {
        batch: agent_harness::drain::BatchOptions::default(),
        run_dir: dir.to_path_buf(),
        from_turn,
        live_writes: false,
    };
    let end = agent_harness::lab::replay::replay(cfg, &opts, &mut out).await;
    (
        agent_harness::app::replay_exit(end),
        String::from_utf8(out).unwrap(),
    )
}

/// A copy of the binary another user may run: the build folder may sit
/// under a home only its owner can enter.
pub fn binary_for_anyone(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let copy = dir.join("agent-harness-bin");
    std::fs::copy(assert_cmd::cargo::cargo_bin("agent-harness"), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

/// Runs the binary on the project as `nobody` (as root only): nobody may
/// enter the project and read its config and task `t` but write nothing.
pub fn as_nobody(project: &Project, command: &str) -> std::process::Output {
    use std::os::unix::fs::PermissionsExt;
    for dir in [
        project.root(),
        &project.root().join("tasks"),
        &project.root().join("tasks/inbox"),
    ] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for f in ["agent.toml", "tasks/inbox/t.md"] {
        std::fs::set_permissions(
            project.root().join(f),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
    }
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(binary_for_anyone(project.root()))
        .args(["--config", "agent.toml", command])
        .current_dir(project.root())
        .output()
        .unwrap()
}

/// Fails a test that runs the binary with no config of its own when this
/// machine has a system one: the lookup would read it (and the command
/// act on that deployment).
pub fn no_system_config() {
    let system = Path::new("/etc/agent-harness/agent.toml");
    assert!(
        !system.exists(),
        "{} exists: this test needs a machine without a system config",
        system.display()
    );
}

/// What the binary printed to stdout.
pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the binary printed to stderr.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
