//! A stdio server's process: started in a process group of its own with
//! only PATH, HOME and `env_pass` of the environment, its stderr read into
//! a capped tail and a capped backlog for `run.log`, and its whole group
//! stopped — SIGTERM, then SIGKILL after 2 s — however the run ends.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use harness_config::StdioCommand;

/// Characters of one stderr line kept.
const LINE_CHARS: usize = 400;
/// Bytes of one stderr line read: well past what is kept, so a secret
/// that straddles this cut is past the kept part too.
const RAW_LINE_BYTES: usize = 8 * 1024;
/// Lines kept for the message of a server that failed.
const TAIL_LINES: usize = 12;
/// Bytes of stderr waiting for a task's `run.log`; the rest is counted.
const BACKLOG_BYTES: usize = 16 * 1024;
/// How long a server has to leave after SIGTERM.
const GRACE: Duration = Duration::from_secs(2);

/// What a server wrote to stderr: each line redacted, then its control
/// characters escaped, then cut (so no part of a secret survives a cut).
#[derive(Debug, Default)]
pub(super) struct Stderr {
    redactor: Arc<harness_config::Redactor>,
    tail: VecDeque<String>,
    backlog: Vec<String>,
    backlog_bytes: usize,
    left_out: u64,
}

impl Stderr {
    pub(super) fn new(redactor: Arc<harness_config::Redactor>) -> Stderr {
        Stderr {
            redactor,
            ..Stderr::default()
        }
    }

    fn push(&mut self, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let line = self.redactor.redact_str(line.trim_end());
        let line = harness_base::text::clip(&harness_base::text::printable(&line), LINE_CHARS);
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line.clone());
        if self.backlog_bytes + line.len() <= BACKLOG_BYTES {
            self.backlog_bytes += line.len();
            self.backlog.push(line);
        } else {
            self.left_out += 1;
        }
    }

    /// The last lines, joined, for an error message.
    pub(super) fn tail(&self) -> String {
        self.tail.iter().cloned().collect::<Vec<_>>().join(" | ")
    }

    /// The lines written since the last call, and how many were left out.
    pub(super) fn take(&mut self) -> (Vec<String>, u64) {
        self.backlog_bytes = 0;
        (
            std::mem::take(&mut self.backlog),
            std::mem::take(&mut self.left_out),
        )
    }
}

/// Every server group this process started and has not stopped: killed
/// at once when a second signal ends the process without unwinding.
static GROUPS: Mutex<Vec<rustix::process::Pid>> = Mutex::new(Vec::new());

fn groups() -> std::sync::MutexGuard<'static, Vec<rustix::process::Pid>> {
    harness_base::sync::lock(&GROUPS)
}

/// SIGKILL to every server group still running: for an exit that skips
/// the orderly stop.
pub fn kill_all() {
    for group in groups().drain(..) {
        signal_group(group, rustix::process::Signal::KILL);
    }
}

/// A started server process. Dropping it kills its process group.
#[derive(Debug)]
pub(super) struct Process {
    child: Child,
    group: Option<rustix::process::Pid>,
    /// Descendants found outside the group while the server lived
    /// ([`Process::note_strays`]).
    strays: Vec<rustix::process::Pid>,
}

/// Starts `program args` for stdio: stdin/stdout are the transport.
pub(super) fn spawn(
    command: &StdioCommand,
    stderr: &Arc<Mutex<Stderr>>,
) -> std::io::Result<(Process, ChildStdout, ChildStdin)> {
    let StdioCommand {
        program,
        args,
        dir,
        inherited,
        passed,
    } = command;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .envs(inherited.iter().map(|(k, v)| (k, v)))
        .envs(passed.iter().map(|(k, v)| (k, v.expose())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw);
    groups().extend(group);
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(std::io::Error::other("the server's stdio was not opened"));
    };
    if let Some(err) = child.stderr.take() {
        tokio::spawn(read_stderr(err, Arc::clone(stderr)));
    }
    Ok((
        Process {
            child,
            group,
            strays: Vec::new(),
        },
        stdout,
        stdin,
    ))
}

async fn read_stderr(mut from: ChildStderr, into: Arc<Mutex<Stderr>>) {
    let mut buf = vec![0u8; 8192];
    let mut line = Vec::new();
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                harness_base::sync::lock(&into).push(&line);
                line.clear();
            } else if line.len() < RAW_LINE_BYTES {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        harness_base::sync::lock(&into).push(&line);
    }
}

impl Process {
    /// Whether the server process has ended.
    pub(super) fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// Notes the server's descendants that left its group (`setsid()`),
    /// while the server lives: once it is gone they are no longer known as
    /// its own. Called before its connection is closed, as a stdio server
    /// exits when its stdin ends.
    pub(super) fn note_strays(&mut self) {
        if let Some(group) = self.group {
            for pid in descendants_outside(group) {
                if !self.strays.contains(&pid) {
                    self.strays.push(pid);
                }
            }
        }
    }

    /// SIGTERM to the group and to the strays noted or found now; SIGKILL
    /// to what is left after 2 s.
    pub(super) async fn stop(mut self) {
        if let Some(group) = self.group {
            self.note_strays();
            let strays = self.strays.clone();
            signal_group(group, rustix::process::Signal::TERM);
            signal_each(&strays, rustix::process::Signal::TERM);
            let _ = tokio::time::timeout(GRACE, self.child.wait()).await;
            signal_each(&strays, rustix::process::Signal::KILL);
        }
        // Children of the server may outlive it: the group goes whole.
        self.kill().await;
    }

    /// SIGKILL to the group and to the server's descendants outside it,
    /// and the process waited for.
    pub(super) async fn kill(mut self) {
        self.kill_group();
        let _ = self.child.wait().await;
    }

    fn kill_group(&mut self) {
        if let Some(group) = self.group.take() {
            signal_each(&self.strays, rustix::process::Signal::KILL);
            signal_each(&descendants_outside(group), rustix::process::Signal::KILL);
            signal_group(group, rustix::process::Signal::KILL);
            forget(group);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// The processes below `server` (its children, theirs, …) that are not in
/// its process group: those that left it with `setsid()` or `setpgid()`.
/// Read from `/proc`; one that detached twice (a daemon) has left the
/// server's tree too, and only the unit's cgroup ends it (deploy/README.md).
fn descendants_outside(server: rustix::process::Pid) -> Vec<rustix::process::Pid> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // "pid (comm) state ppid pgrp …": comm may hold anything, so the
        // fields are read after its last ')'.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let fields: Vec<i32> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().skip(1).take(2))
            .into_iter()
            .flatten()
            .filter_map(|f| f.parse().ok())
            .collect();
        if let [ppid, pgrp] = fields[..] {
            parents.push((pid, ppid, pgrp));
        }
    }
    let mut tree = vec![server.as_raw_nonzero().get()];
    let mut i = 0;
    while let Some(&at) = tree.get(i) {
        tree.extend(parents.iter().filter(|p| p.1 == at).map(|p| p.0));
        i += 1;
    }
    parents
        .iter()
        .filter(|(pid, _, pgrp)| tree[1..].contains(pid) && *pgrp != tree[0])
        .filter_map(|(pid, _, _)| rustix::process::Pid::from_raw(*pid))
        .collect()
}

fn signal_each(pids: &[rustix::process::Pid], signal: rustix::process::Signal) {
    for pid in pids {
        // ESRCH: gone already.
        let _ = rustix::process::kill_process(*pid, signal);
    }
}

fn forget(group: rustix::process::Pid) {
    groups().retain(|g| *g != group);
}

fn signal_group(group: rustix::process::Pid, signal: rustix::process::Signal) {
    // ESRCH: the group is gone already.
    let _ = rustix::process::kill_process_group(group, signal);
}
