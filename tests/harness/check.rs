//! `check` refuses what it can decide locally (docs/operating.md, "Commands"):
//! an MCP server whose program would not start, and a host list that holds URLs
//! (a deny list of URLs denies nothing) — the latter for every command.

use crate::common::*;

#[tokio::test]
async fn check_refuses_an_mcp_command_that_does_not_exist_naming_its_key() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .task("t", "Answer.")
        .config(
            "[mcp.servers.gone]\ncommand = [\"mcp-server-that-is-not-installed\"]\n\
             [mcp.servers.plain]\ncommand = [\"./not-executable.sh\"]\n\
             [mcp.servers.fine]\ncommand = [\"sh\", \"-c\", \"true\"]\n",
        )
        .build()
        .await;
    std::fs::write(s.root().join("not-executable.sh"), "#!/bin/sh\n").unwrap();

    let out = bin(&s).arg("check").output().unwrap();

    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let printed = stdout(&out);
    assert_contains(
        &printed,
        "[mcp.servers.gone] command: \"mcp-server-that-is-not-installed\" is not found in PATH",
    );
    assert!(
        printed.contains("[mcp.servers.plain] command: ")
            && printed.contains("not-executable.sh is not executable by this user"),
        "{printed}"
    );
    assert!(!printed.contains("[mcp.servers.fine]"), "{printed}");
}

#[tokio::test]
async fn a_deny_list_of_urls_is_a_config_error_for_every_command_naming_the_host_meant() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
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
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .task("good", "Do it.")
        .build()
        .await;
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

/// The folders the service user cannot write are named by their keys. As
/// root, `check` runs as `nobody`; otherwise a folder is made read-only.
#[tokio::test]
async fn check_as_another_user_names_every_folder_it_cannot_write() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .task("t", "x")
        .build()
        .await;
    let root = unsafe { libc::geteuid() } == 0;
    let out = if root {
        as_nobody(&s, "check")
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            s.root().join("tasks/inbox"),
            std::fs::Permissions::from_mode(0o555),
        )
        .unwrap();
        let out = bin(&s).arg("check").output().unwrap();
        std::fs::set_permissions(
            s.root().join("tasks/inbox"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        out
    };
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    let inbox = s.root().join("tasks/inbox").display().to_string();
    assert_contains(
        &text,
        &format!("[paths] inbox: {inbox} is not writable by this user"),
    );
    if root {
        let done = s.root().join("tasks/done").display().to_string();
        assert_contains(
            &text,
            &format!("[paths] done: {done} does not exist and cannot be created by this user"),
        );
        assert!(text.contains("[paths] logs: "), "{text}");
    }
}

#[tokio::test]
async fn check_warns_when_a_task_could_carry_note_text_out() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .config("[tools.noteworx]\nbase_url = \"http://127.0.0.1:9\"\n")
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
        .await;

    let out = harness_command()
        .arg("check")
        .current_dir(s.root())
        .env("NOTEWORX_TOKEN", crate::common::fake_noteworx::TOKEN)
        .output()
        .unwrap();

    assert_eq!(out.status.code(), Some(0), "a warning is not a problem");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_contains(
        &text,
        "a-both.md: warning: this task may read notes and fetch any URL",
    );
    assert!(!text.contains("b-notes-only.md"), "{text}");
    assert!(!text.contains("c-write-and-fetch.md"), "{text}");
    assert_contains(&text, "3 task file(s), 0 with problems, 1 with warnings");

    s.write_config(
        "http://127.0.0.1:9/v1",
        "[tools.noteworx]\nbase_url = \"http://127.0.0.1:9\"\n[tools.webfetch]\nallow_hosts = [\"example.org\"]\n",
    );
    let out = harness_command()
        .arg("check")
        .current_dir(s.root())
        .env("NOTEWORX_TOKEN", crate::common::fake_noteworx::TOKEN)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 with warnings"),
        "an allow list settles it"
    );
}

#[tokio::test]
async fn check_says_which_recurring_folder_was_meant_and_nothing_when_there_is_none() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .task("t", "Answer.")
        .build()
        .await;
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
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
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

#[tokio::test]
async fn check_refuses_every_placeholder_the_project_ships() {
    // The example's endpoint id, the README's, and the package's notes URL.
    let cases = [
        (
            "abc123xyz",
            "",
            "[runpod] endpoint_id is a placeholder (\"abc123xyz\")",
        ),
        (
            "ENDPOINT_ID",
            "",
            "[runpod] endpoint_id is a placeholder (\"ENDPOINT_ID\")",
        ),
        (
            "my-endpoint",
            "https://notes.example.com/",
            "[tools.noteworx] base_url is a placeholder (\"https://notes.example.com\")",
        ),
    ];
    for (id, notes, said) in cases {
        let s = scenario()
            .config_file(&format!(
                "[endpoint]\nkind = \"runpod\"\n[runpod]\nendpoint_id = \"{id}\"\n[tools.noteworx]\nbase_url = \"{notes}\"\n"
            ))
            .build()
            .await;
        let out = bin(&s)
            .env("RUNPOD_API_KEY", "rp-key")
            .env("NOTEWORX_TOKEN", "nwx-token")
            .arg("check")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
        assert!(
            stdout(&out).contains(said)
                && stdout(&out).contains("1 config problem(s); 0 task file(s), 0 with problems"),
            "{said}: {}",
            stdout(&out)
        );
        // A run, and an exec, refuse it before anything is sent or moved.
        std::fs::write(s.root().join("tasks/inbox/t.md"), "Hello.").unwrap();
        for args in [&["run"][..], &["exec", "Hello."]] {
            let out = bin(&s)
                .env("RUNPOD_API_KEY", "rp-key")
                .env("NOTEWORX_TOKEN", "nwx-token")
                .args(args)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
            assert!(stderr(&out).contains(said), "{args:?}: {}", stderr(&out));
        }
        assert_eq!(s.inbox(), ["t.md"]);
        assert!(!s.root().join("logs/t").exists());
    }
}

#[tokio::test]
async fn a_task_named_report_or_eval_is_refused_by_check_and_never_runs() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .task("report", "Summarise the week.")
        .build()
        .await;
    let out = bin(&s).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_contains(
        stdout(&out),
        "report.md: task name \"report\" is reserved: logs/report/ holds the HTML report",
    );
    let out = bin(&s).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("the inbox entry report.md will never run: task name \"report\" is reserved"),
        "{}",
        stderr(&out)
    );
    assert_eq!(s.inbox(), ["report.md"]);
    assert!(!s.root().join("logs/report").exists());
    for args in [
        &["run-task", "eval"][..],
        &["exec", "--name", "eval", "Hi."],
    ] {
        let out = bin(&s).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("is reserved"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[tokio::test]
async fn a_recurring_task_named_eval_is_said_by_every_run_never_skipped_silently() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
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
