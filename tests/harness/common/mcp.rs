//! What the MCP tests share: the stack's Python with the official SDK, the
//! test servers in `tests/mcp/`, the config section that starts one, an
//! environment holding a secret to pass, and whether a process is gone.

use std::path::Path;

use super::{stack_paths, test_env};

/// The secret the tests pass to a server with `env_pass` (as
/// `MCP_TEST_TOKEN` or `MCP_TOKEN`).
pub const PASSED: &str = "SECRETabcdefghijklmnopqrstuvwxyz0123456789";

/// The stack's Python with PyPI's `mcp` SDK.
pub fn mcp_python() -> String {
    stack_paths()
        .remove("MCP_PYTHON")
        .expect("scripts/stack paths names MCP_PYTHON")
}

/// A server script of `tests/mcp/`.
pub fn mcp_script(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(file)
        .display()
        .to_string()
}

/// `[mcp.servers.NAME]` running `tests/mcp/FILE` with `args`, plus `extra` keys.
pub fn mcp_server(name: &str, file: &str, args: &[&str], extra: &str) -> String {
    let mut command = vec![mcp_python(), mcp_script(file)];
    command.extend(args.iter().map(|a| a.to_string()));
    format!(
        "[mcp.servers.{name}]\ncommand = {}\n{extra}\n",
        serde_json::to_string(&command).unwrap()
    )
}

/// The tests' environment, with PATH, HOME and the passed secret.
pub fn mcp_env(key: &str) -> Option<String> {
    match key {
        "MCP_TEST_TOKEN" | "MCP_TOKEN" => Some(PASSED.to_string()),
        "PATH" | "HOME" => std::env::var(key).ok(),
        _ => test_env(key),
    }
}

/// Whether the process whose id `pid` holds is gone (a zombie counts).
pub fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Whether the process whose id the file `pid_file` holds is gone.
pub fn pid_file_gone(pid_file: &Path) -> bool {
    process_gone(&std::fs::read_to_string(pid_file).unwrap())
}

/// The names of the tools a request offered.
pub fn offered_names(request: &serde_json::Value) -> Vec<String> {
    let asked = super::sent(request);
    asked.tool_names().into_iter().map(String::from).collect()
}
