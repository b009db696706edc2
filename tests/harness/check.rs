//! `check` refuses what it can decide locally (SPEC §22): an MCP server
//! whose program would not start, and a host list that holds URLs (a deny
//! list of URLs denies nothing) — the latter for every command.

use crate::cli::{bin, stderr, stdout};
use crate::common::*;

#[test]
fn check_refuses_an_mcp_command_that_does_not_exist_naming_its_key() {
    let project = Project::new();
    project.task("t", "Answer.");
    std::fs::write(project.root().join("not-executable.sh"), "#!/bin/sh\n").unwrap();
    project.write_config(
        "http://127.0.0.1:9/v1",
        "[mcp.servers.gone]\ncommand = [\"mcp-server-that-is-not-installed\"]\n\
         [mcp.servers.plain]\ncommand = [\"./not-executable.sh\"]\n\
         [mcp.servers.fine]\ncommand = [\"sh\", \"-c\", \"true\"]\n",
    );

    let out = bin(&project).arg("check").output().unwrap();

    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let printed = stdout(&out);
    assert!(
        printed.contains(
            "[mcp.servers.gone] command: \"mcp-server-that-is-not-installed\" is not found in PATH"
        ),
        "{printed}"
    );
    assert!(
        printed.contains("[mcp.servers.plain] command: ")
            && printed.contains("not-executable.sh is not executable by this user"),
        "{printed}"
    );
    assert!(!printed.contains("[mcp.servers.fine]"), "{printed}");
}

#[test]
fn a_deny_list_of_urls_is_a_config_error_for_every_command_naming_the_host_meant() {
    let project = Project::new();
    project.task("t", "Answer.");
    project.write_config(
        "http://127.0.0.1:9/v1",
        "[tools.webfetch]\ndeny_hosts = [\"https://evil.example/\"]\n",
    );
    for args in [&["check"][..], &["run"], &["runs"], &["run-task", "t"]] {
        let out = bin(&project).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(
                "[tools.webfetch] deny_hosts: \"https://evil.example/\" is not a host alone"
            ) && stderr(&out).contains("write \"evil.example\""),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(project.inbox(), ["t.md"]);
}
