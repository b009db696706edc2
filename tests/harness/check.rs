//! `check` refuses what it can decide locally (docs/operating.md, "Commands"):
//! an MCP server whose program would not start, and a host list that holds URLs
//! (a deny list of URLs denies nothing) — the latter for every command.

use crate::common::*;

/// `check` of the scene's project.
fn check(s: &Scene) -> std::process::Output {
    bin(s).arg("check").output().unwrap()
}

#[tokio::test]
async fn check_refuses_an_mcp_command_that_does_not_exist_naming_its_key() {
    let s = offline()
        .task("t", "Answer.")
        .config(
            "[mcp.servers.gone]\ncommand = [\"mcp-server-that-is-not-installed\"]\n\
             [mcp.servers.plain]\ncommand = [\"./not-executable.sh\"]\n\
             [mcp.servers.fine]\ncommand = [\"sh\", \"-c\", \"true\"]\n",
        )
        .build()
        .await;
    std::fs::write(s.root().join("not-executable.sh"), "#!/bin/sh\n").unwrap();

    let out = check(&s);

    let printed = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{printed}");
    assert_contains(
        &printed,
        "[mcp.servers.gone] command: \"mcp-server-that-is-not-installed\" is not found in PATH",
    );
    assert_contains(&printed, "[mcp.servers.plain] command: ");
    assert_contains(&printed, "not-executable.sh is not executable by this user");
    assert_lacks(&printed, "[mcp.servers.fine]");
}

#[tokio::test]
async fn a_deny_list_of_urls_is_a_config_error_for_every_command_naming_the_host_meant() {
    let s = offline()
        .task("t", "Answer.")
        .config("[tools.webfetch]\ndeny_hosts = [\"https://evil.example/\"]\n")
        .build()
        .await;
    for args in [&["check"][..], &["run"], &["runs"], &["run-task", "t"]] {
        let out = bin(&s).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(
                "[tools.webfetch] deny_hosts: \"https://evil.example/\" is not a host alone"
            ) && stderr(&out).contains("write \"evil.example\""),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(s.inbox(), ["t.md"]);
}

#[tokio::test]
async fn check_warns_about_inbox_entries_that_will_never_run() {
    let s = offline().task("good", "Do it.").build().await;
    let inbox = s.root().join("tasks/inbox");
    std::fs::write(inbox.join("notes.txt"), "x").unwrap();
    std::fs::write(inbox.join("TASK.MD"), "x").unwrap();
    let out = bin(&s).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "warnings do not fail check");
    let text = stdout(&out);
    for name in ["notes.txt", "TASK.MD"] {
        assert!(
            text.lines().any(|l| l.contains(name)
                && l.contains("warning: it will never run (only NAME.md files run")),
            "{name}: {text}"
        );
    }
    assert!(text.contains("1 task file(s)"), "{text}");
}

/// Whether the tests run as root.
fn running_as_root() -> bool {
    (unsafe { libc::geteuid() }) == 0
}

/// `check` as a user who cannot write the project's folders: as root,
/// `nobody`; otherwise this user, the inbox made read-only meanwhile.
fn check_as_another_user(s: &Scene) -> std::process::Output {
    use std::os::unix::fs::PermissionsExt;
    if running_as_root() {
        return as_nobody(s, "check");
    }
    let inbox = s.root().join("tasks/inbox");
    std::fs::set_permissions(&inbox, std::fs::Permissions::from_mode(0o555)).unwrap();
    let out = check(s);
    std::fs::set_permissions(&inbox, std::fs::Permissions::from_mode(0o755)).unwrap();
    out
}

/// The folders the service user cannot write are named by their keys.
#[tokio::test]
async fn check_as_another_user_names_every_folder_it_cannot_write() {
    let s = offline().task("t", "x").build().await;

    let out = check_as_another_user(&s);

    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}{}", stderr(&out));
    let inbox = s.root().join("tasks/inbox").display().to_string();
    assert_contains(
        &text,
        &format!("[paths] inbox: {inbox} is not writable by this user"),
    );
    if running_as_root() {
        let done = s.root().join("tasks/done").display().to_string();
        assert_contains(
            &text,
            &format!("[paths] done: {done} does not exist and cannot be created by this user"),
        );
        assert_contains(&text, "[paths] logs: ");
    }
}

/// Three tasks beside the notes service, with `config` added:
/// `a-both` may read notes and fetch, `b-notes-only` only read them,
/// `c-write-and-fetch` fetch and write but not read.
async fn tasks_beside_the_notes(config: &str) -> Scene {
    offline()
        .config("[tools.noteworx]\nbase_url = \"http://127.0.0.1:9\"\n")
        .config(config)
        .task("a-both", "Read a note and fetch a page.")
        .task(
            "b-notes-only",
            "+++\ntools = [\"noteworx_read_note\"]\n+++\nRead.",
        )
        .task(
            "c-write-and-fetch",
            "+++\ntools = [\"webfetch\", \"noteworx_create_attachment\"]\n+++\nGo.",
        )
        .build()
        .await
}

/// `check` with the notes service's token in the environment.
fn check_with_notes_token(s: &Scene) -> std::process::Output {
    harness_command()
        .arg("check")
        .current_dir(s.root())
        .env("NOTEWORX_TOKEN", crate::common::fake_noteworx::TOKEN)
        .output()
        .unwrap()
}

#[tokio::test]
async fn check_warns_when_a_task_could_carry_note_text_out() {
    let s = tasks_beside_the_notes("").await;

    let out = check_with_notes_token(&s);

    assert_eq!(out.status.code(), Some(0), "a warning is not a problem");
    let text = stdout(&out);
    assert_contains(
        &text,
        "a-both.md: warning: this task may read notes and fetch any URL",
    );
    assert_lacks(&text, "b-notes-only.md");
    assert_lacks(&text, "c-write-and-fetch.md");
    assert_contains(&text, "3 task file(s), 0 with problems, 1 with warnings");
}

#[tokio::test]
async fn an_allow_list_settles_the_warning_about_carrying_note_text_out() {
    let s = tasks_beside_the_notes("[tools.webfetch]\nallow_hosts = [\"example.org\"]\n").await;

    let out = check_with_notes_token(&s);

    assert!(
        stdout(&out).contains("0 with warnings"),
        "an allow list settles it"
    );
}

#[tokio::test]
async fn check_says_which_recurring_folder_was_meant_and_nothing_when_there_is_none() {
    let s = offline().task("t", "Answer.").build().await;
    let out = bin(&s).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!stdout(&out).contains("recurring"), "{}", stdout(&out));

    std::fs::create_dir_all(s.root().join("tasks/recuring")).unwrap();
    let out = bin(&s).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "a warning: {}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("tasks/recuring does: did you mean tasks/recurring/?")
            && text.contains("config ok with 1 warning(s)"),
        "{text}"
    );
}

#[tokio::test]
async fn check_lists_the_extra_keys_sent_untouched_and_warns_of_a_misspelt_one() {
    let s = offline()
        .config("[model.extra]\nrepeat_penaltly = 1.1\ndry_multiplier = 0.8\nmy_own = 1\n")
        .build()
        .await;
    let out = bin(&s).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert_contains(
        &text,
        "sent to the server untouched: dry_multiplier, my_own, repeat_penaltly",
    );
    assert!(
        text.contains("[model.extra] repeat_penaltly: ")
            && text.contains("did you mean repeat_penalty?"),
        "{text}"
    );
    assert!(!text.contains("[model.extra] my_own:"), "{text}");
}

/// The binary in the project with the RunPod key and the notes token.
fn with_keys(s: &Scene) -> assert_cmd::Command {
    let mut cmd = bin(s);
    cmd.env("RUNPOD_API_KEY", "rp-key")
        .env("NOTEWORX_TOKEN", "nwx-token");
    cmd
}

/// A RunPod project whose `endpoint_id` is `id` and notes URL `notes`:
/// `check` refuses it saying `said`, and a run and an exec refuse it
/// before anything is sent or moved.
async fn assert_placeholder_refused(id: &str, notes: &str, said: &str) {
    let s = scenario()
        .config_file(&format!(
            "[endpoint]\nkind = \"runpod\"\n[runpod]\nendpoint_id = \"{id}\"\n[tools.noteworx]\nbase_url = \"{notes}\"\n"
        ))
        .build()
        .await;
    let out = with_keys(&s).arg("check").output().unwrap();
    let printed = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{printed}");
    assert_contains(&printed, said);
    assert_contains(
        &printed,
        "1 config problem(s); 0 task file(s), 0 with problems",
    );
    std::fs::write(s.root().join("tasks/inbox/t.md"), "Hello.").unwrap();
    for args in [&["run"][..], &["exec", "Hello."]] {
        let out = with_keys(&s).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(s.inbox(), ["t.md"]);
    assert!(!s.root().join("logs/t").exists());
}

#[tokio::test]
async fn check_refuses_the_examples_placeholder_endpoint_id() {
    let said = "[runpod] endpoint_id is a placeholder (\"abc123xyz\")";
    assert_placeholder_refused("abc123xyz", "", said).await;
}

#[tokio::test]
async fn check_refuses_the_readmes_placeholder_endpoint_id() {
    let said = "[runpod] endpoint_id is a placeholder (\"ENDPOINT_ID\")";
    assert_placeholder_refused("ENDPOINT_ID", "", said).await;
}

#[tokio::test]
async fn check_refuses_the_packages_placeholder_notes_url() {
    let notes = "https://notes.example.com/";
    let said = "[tools.noteworx] base_url is a placeholder (\"https://notes.example.com\")";
    assert_placeholder_refused("my-endpoint", notes, said).await;
}

#[tokio::test]
async fn a_task_named_report_is_refused_by_check_and_never_runs() {
    let s = offline()
        .task("report", "Summarise the week.")
        .build()
        .await;

    let out = check(&s);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_contains(
        stdout(&out),
        "report.md: task name \"report\" is reserved: logs/report/ holds the HTML report",
    );

    let out = bin(&s).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(
        stderr(&out),
        "the inbox entry report.md will never run: task name \"report\" is reserved",
    );
    assert_eq!(s.inbox(), ["report.md"]);
    assert!(!s.root().join("logs/report").exists());
}

#[tokio::test]
async fn a_task_named_eval_is_refused_by_run_task_and_exec() {
    let s = offline().build().await;

    for args in [
        &["run-task", "eval"][..],
        &["exec", "--name", "eval", "Hi."],
    ] {
        let out = bin(&s).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_contains(stderr(&out), "is reserved");
    }
}

#[tokio::test]
async fn a_recurring_task_named_eval_is_said_by_every_run_never_skipped_silently() {
    let s = offline()
        .recurring("eval", "+++\nschedule = \"@daily\"\n+++\nCheck the evals.")
        .build()
        .await;
    let out = bin(&s).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("the recurring task eval.md will never run: task name \"eval\" is reserved"),
        "{}",
        stderr(&out)
    );
    assert!(!s.root().join("logs/eval").exists());
}
